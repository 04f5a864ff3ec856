-- The clients' answers to the requests of stateful MCP sessions that are
-- too large for a notification: the replica that received one keeps it
-- here and notifies its id, and the replica that sent the request reads it
-- back. Only PostgreSQL fills it (SQLite serves one process, which hands
-- an answer over in memory). Bounded by the store: so large, for so long.

-- +goose Up
CREATE TABLE mcp_answers (
    id         TEXT NOT NULL PRIMARY KEY,
    body       BLOB NOT NULL,
    created_at TEXT NOT NULL
) STRICT;

-- The answers past their retention, swept as new ones are kept.
CREATE INDEX mcp_answers_created_idx ON mcp_answers (created_at);

-- +goose Down
DROP TABLE mcp_answers;
