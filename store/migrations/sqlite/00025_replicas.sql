-- The replicas of `usher serve` as each last reported itself: a heartbeat
-- every interval rewrites its row (seen_at, and expires_at, past which the
-- replica counts as gone), with its version, listen address, start time
-- and its view of the upstream MCP servers (JSON). A replica that
-- stops removes its row; one that dies ages out at expires_at, and its row
-- is deleted by the others later.

-- +goose Up
CREATE TABLE replicas (
    id         TEXT NOT NULL PRIMARY KEY,
    version    TEXT NOT NULL,
    addr       TEXT NOT NULL DEFAULT '',
    started_at TEXT NOT NULL,
    seen_at    TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    upstreams  TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(upstreams))
) STRICT;

-- The replicas alive at a time, and the long dead ones to delete.
CREATE INDEX replicas_expires_idx ON replicas (expires_at);

-- +goose Down
DROP TABLE replicas;
