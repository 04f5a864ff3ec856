-- The stateful MCP sessions, which any replica serves: a session's id (the
-- one its sealed Mcp-Session-Id names), the principal it belongs to, its
-- state (protocol version, the client's capabilities and information, the
-- log level; JSON, bounded by the store) and when it ends. A request of the
-- session on a replica that does not hold it restores it from this row.

-- +goose Up
CREATE TABLE mcp_sessions (
    id         TEXT NOT NULL PRIMARY KEY,
    principal  TEXT NOT NULL,
    state      TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
) STRICT;

-- The sessions that have ended, deleted as new ones begin.
CREATE INDEX mcp_sessions_expires_idx ON mcp_sessions (expires_at);

-- +goose Down
DROP TABLE mcp_sessions;
