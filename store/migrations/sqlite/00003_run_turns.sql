-- What the assistant runtime needs beyond the initial schema: where a run's
-- turns stand, and an index that finds a conversation's messages among its
-- events without reading the rest.

-- +goose Up

-- turn_seq is the sequence of the user message whose turn is open (0: no
-- turn is open); handled_seq that of the last user message whose turn ended.
ALTER TABLE runs ADD COLUMN turn_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN handled_seq INTEGER NOT NULL DEFAULT 0;

-- A conversation's messages by sequence.
CREATE INDEX run_events_messages_idx ON run_events (run_id, seq) WHERE type LIKE 'message.%';

-- +goose Down
DROP INDEX run_events_messages_idx;
ALTER TABLE runs DROP COLUMN handled_seq;
ALTER TABLE runs DROP COLUMN turn_seq;
