-- What the assistant runtime needs beyond the initial schema: where a run's
-- turns stand, and an index that finds a conversation's messages among its
-- events without reading the rest.

-- +goose Up

-- turn_seq is the sequence of the user message whose turn is open (0: no
-- turn is open); handled_seq that of the last user message whose turn ended.
-- The next turn answers the first user message after handled_seq.
ALTER TABLE runs
    ADD COLUMN turn_seq    bigint NOT NULL DEFAULT 0,
    ADD COLUMN handled_seq bigint NOT NULL DEFAULT 0;

-- A conversation's messages by sequence: the latest 24 for a turn, and the
-- pages of the message API, whatever the length of the event log.
CREATE INDEX run_events_messages_idx ON run_events (run_id, seq) WHERE type LIKE 'message.%';

-- +goose Down
DROP INDEX run_events_messages_idx;
ALTER TABLE runs DROP COLUMN handled_seq, DROP COLUMN turn_seq;
