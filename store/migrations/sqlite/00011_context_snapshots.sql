-- Context snapshots: versioned summaries of a run's conversation, each
-- covering an exact span of its event log (from_seq to to_seq, both
-- message events of the run); the same logical schema as on PostgreSQL. A
-- snapshot never deletes or rewrites an event.

-- +goose Up

-- version numbers a run's snapshots from 1, each the previous one's plus
-- one, so that of concurrent writers of one version one wins; summary is
-- the summary's text, tokens its estimated size; kind says whether the
-- runtime (automatic) or a person (manual) asked for it; model names the
-- model that wrote it.
CREATE TABLE context_snapshots (
    run_id     TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    version    INTEGER NOT NULL CHECK (version > 0),
    from_seq   INTEGER NOT NULL CHECK (from_seq > 0),
    to_seq     INTEGER NOT NULL CHECK (to_seq >= from_seq),
    summary    TEXT    NOT NULL,
    tokens     INTEGER NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    kind       TEXT    NOT NULL CHECK (kind IN ('automatic', 'manual')),
    model      TEXT    NOT NULL DEFAULT '',
    created_at TEXT    NOT NULL,
    PRIMARY KEY (run_id, version)
) STRICT;

-- +goose Down
DROP TABLE context_snapshots;
