-- Signed checkpoints of the audit log: each is a note, signed with the
-- audit key, that names the log's head (seq and hash) at a time. seq is the
-- key, so that two replicas that sign the same head store one checkpoint.
-- seq, hash and at repeat what the note says, for listing and paging; a
-- verifier reads the note.

-- +goose Up
CREATE TABLE audit_checkpoints (
    seq  bigint      PRIMARY KEY CHECK (seq > 0),
    hash text        NOT NULL,
    at   timestamptz NOT NULL,
    note text        NOT NULL
);

-- +goose Down
DROP TABLE audit_checkpoints;
