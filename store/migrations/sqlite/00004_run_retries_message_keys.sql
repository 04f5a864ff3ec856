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

-- A run that an older release left with a user message no turn answers,
-- neither leased nor queued (released after a turn failed before it
-- started, and perhaps parked Idle since), is queued for its turn.
UPDATE runs SET status = 'InProgress', queued_at = strftime('%Y-%m-%dT%H:%M:%S', 'now') || '.000000Z'
WHERE status IN ('InProgress', 'Idle') AND deleted_at IS NULL AND lease_owner IS NULL AND queued_at IS NULL
  AND EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = runs.id
    AND e.type LIKE 'message.%' AND e.type = 'message.user' AND e.seq > runs.handled_seq);

-- +goose Down
DROP TABLE run_message_keys;
ALTER TABLE runs DROP COLUMN not_before;
ALTER TABLE runs DROP COLUMN failures;
