-- The events of the stateful MCP sessions' response streams, kept so that a
-- client resuming a stream (Last-Event-ID) on any replica is sent what it
-- missed: per session (an opaque key the MCP server derives from the
-- session's handle) and stream, the event's index in its stream, its data
-- (a JSON-RPC message; empty for a priming event) and when it was written.
-- Bounded by the store: so many events per session, for so long.

-- +goose Up
CREATE TABLE mcp_events (
    session    text        NOT NULL,
    stream     text        NOT NULL,
    idx        bigint      NOT NULL CHECK (idx >= 0),
    data       bytea       NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (session, stream, idx)
);

-- A session's oldest events, trimmed beyond its bound.
CREATE INDEX mcp_events_session_idx ON mcp_events (session, created_at);
-- The events past their retention, swept as new streams begin.
CREATE INDEX mcp_events_created_idx ON mcp_events (created_at);

-- +goose Down
DROP TABLE mcp_events;
