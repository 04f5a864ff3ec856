-- The delivery of the audit log to sinks (audit.sinks): for each, the
-- sequence of the last record it was sent (its cursor, which only moves
-- forward), when that was, and the lease of the one replica that delivers
-- to it, taken with a conditional update and fenced by its token.

-- +goose Up

CREATE TABLE audit_sinks (
    name             TEXT NOT NULL PRIMARY KEY,
    delivered_seq    INTEGER NOT NULL DEFAULT 0 CHECK (delivered_seq >= 0),
    delivered_at     TEXT,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    fencing_token    INTEGER NOT NULL DEFAULT 0
) STRICT;

-- +goose Down
DROP TABLE audit_sinks;
