-- The replicas of `usher serve` as each last reported itself: a heartbeat
-- every interval rewrites its row (seen_at, and expires_at, past which the
-- replica counts as gone), with its version, listen address, start time
-- and its view of the upstream MCP servers (JSON). A replica that
-- stops removes its row; one that dies ages out at expires_at, and its row
-- is deleted by the others later.

-- +goose Up
CREATE TABLE replicas (
    id         text        PRIMARY KEY,
    version    text        NOT NULL,
    addr       text        NOT NULL DEFAULT '',
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    upstreams  json        NOT NULL DEFAULT '[]'
);

-- The replicas alive at a time, and the long dead ones to delete.
CREATE INDEX replicas_expires_idx ON replicas (expires_at);

-- +goose Down
DROP TABLE replicas;
