-- Context accounting: each run records how large the model context of its
-- latest model step was, and the model's limit, for the API and the UI.

-- +goose Up

-- context_tokens is the size of the context, context_limit the model's
-- limit, both in tokens (0: nothing recorded yet); context_source says
-- whether the size was estimated before the step or reported by the
-- provider after it; context_seq is the last event the context held, and
-- context_at when the figure was recorded.
ALTER TABLE runs
    ADD COLUMN context_tokens bigint      NOT NULL DEFAULT 0,
    ADD COLUMN context_limit  bigint      NOT NULL DEFAULT 0,
    ADD COLUMN context_source text        NOT NULL DEFAULT ''
        CHECK (context_source IN ('', 'estimated', 'reported')),
    ADD COLUMN context_seq    bigint      NOT NULL DEFAULT 0,
    ADD COLUMN context_at     timestamptz;

-- +goose Down
ALTER TABLE runs
    DROP COLUMN context_at,
    DROP COLUMN context_seq,
    DROP COLUMN context_source,
    DROP COLUMN context_limit,
    DROP COLUMN context_tokens;
