-- The sessions the replicas share to the stateful HTTP upstreams: one row
-- per pool key (its SHA-256, naming the upstream, the caller and how the
-- session meets the upstream's requests), the upstream's Mcp-Session-Id
-- sealed under the replicas' secret, the protocol version and the
-- upstream's InitializeResult (JSON, bounded by the store), and when the
-- record ends. A replica that needs the key and holds no session of its own
-- joins this one instead of initializing another.

-- +goose Up
CREATE TABLE mcp_upstream_sessions (
    pool_key          text        PRIMARY KEY,
    session           text        NOT NULL,
    protocol_version  text        NOT NULL,
    initialize_result text        NOT NULL,
    created_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL
);

-- The records that have ended, deleted as new ones are written.
CREATE INDEX mcp_upstream_sessions_expires_idx ON mcp_upstream_sessions (expires_at);

-- +goose Down
DROP TABLE mcp_upstream_sessions;
