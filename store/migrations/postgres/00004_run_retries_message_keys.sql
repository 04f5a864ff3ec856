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

-- A run that an older release left with a user message no turn answers,
-- neither leased nor queued (released after a turn failed before it
-- started, and perhaps parked Idle since), is queued for its turn.
UPDATE runs SET status = 'InProgress', queued_at = now()
WHERE status IN ('InProgress', 'Idle') AND deleted_at IS NULL AND lease_owner IS NULL AND queued_at IS NULL
  AND EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = runs.id
    AND e.type LIKE 'message.%' AND e.type = 'message.user' AND e.seq > runs.handled_seq);

-- +goose Down
DROP TABLE run_message_keys;
ALTER TABLE runs DROP COLUMN not_before, DROP COLUMN failures;
