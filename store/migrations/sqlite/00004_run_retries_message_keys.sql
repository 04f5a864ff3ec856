-- Durability of the run queue: a turn that failed is retried after a
-- backoff, and a message posted with an idempotency key is stored once.

-- +goose Up

-- failures counts the run's slices in a row that failed without ending
-- their turn; not_before is when a run queued for a retry may be claimed
-- (NULL: at once).
ALTER TABLE runs ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN not_before TEXT;

-- The idempotency key of each user message posted to a run.
CREATE TABLE run_message_keys (
    run_id          TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    idempotency_key TEXT    NOT NULL,
    seq             INTEGER NOT NULL,
    created_at      TEXT    NOT NULL,
    PRIMARY KEY (run_id, idempotency_key)
) STRICT;

-- +goose Down
DROP TABLE run_message_keys;
ALTER TABLE runs DROP COLUMN not_before;
ALTER TABLE runs DROP COLUMN failures;
