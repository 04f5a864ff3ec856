-- Run metadata and continued runs: a run's metadata holds its settings
-- (the compaction overrides); a run continued from another (manual
-- compaction) names the run it continues and the version of that run's
-- context snapshot its history starts from.

-- +goose Up

-- metadata is a JSON object of the run's settings; parent_run_id the
-- run this one continues (no other run references a run that is not
-- its parent), parent_version the parent's snapshot version (0: none).
ALTER TABLE runs
    ADD COLUMN metadata       jsonb  NOT NULL DEFAULT '{}'::jsonb
        CHECK (jsonb_typeof(metadata) = 'object'),
    ADD COLUMN parent_run_id  text   REFERENCES runs (id) ON DELETE SET NULL,
    ADD COLUMN parent_version bigint NOT NULL DEFAULT 0 CHECK (parent_version >= 0);

-- The runs continued from a run, for its view.
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- +goose Down
DROP INDEX runs_parent;
ALTER TABLE runs
    DROP COLUMN parent_version,
    DROP COLUMN parent_run_id,
    DROP COLUMN metadata;
