-- Durability of the run queue: a turn that failed is retried after a
-- backoff, and a message posted with an idempotency key is stored once.

-- +goose Up

-- failures counts the run's slices in a row that failed without ending
-- their turn; not_before is when a run queued for a retry may be claimed
-- (NULL: at once). A slice that does not fail resets both.
ALTER TABLE runs
    ADD COLUMN failures   integer NOT NULL DEFAULT 0,
    ADD COLUMN not_before timestamptz;

-- The idempotency key of each user message posted to a run: a retry of the
-- post finds the message it stored instead of storing another.
CREATE TABLE run_message_keys (
    run_id          text        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    idempotency_key text        NOT NULL,
    seq             bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (run_id, idempotency_key)
);

-- +goose Down
DROP TABLE run_message_keys;
ALTER TABLE runs DROP COLUMN not_before, DROP COLUMN failures;
