-- The delivery of the audit log to sinks (audit.sinks): for each, the
-- sequence of the last record it was sent (its cursor, which only moves
-- forward), when that was, and the lease of the one replica that delivers
-- to it, taken with a conditional update and fenced by its token.

-- +goose Up

CREATE TABLE audit_sinks (
    name             text PRIMARY KEY,
    delivered_seq    bigint NOT NULL DEFAULT 0 CHECK (delivered_seq >= 0),
    delivered_at     timestamptz,
    lease_owner      text,
    lease_expires_at timestamptz,
    fencing_token    bigint NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE audit_sinks;
