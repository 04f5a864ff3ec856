-- The sessions the replicas share to the stateful HTTP upstreams: one row
-- per pool key (its SHA-256, naming the upstream, the caller and how the
-- session meets the upstream's requests), the upstream's Mcp-Session-Id
-- sealed under the replicas' secret, the protocol version and the
-- upstream's InitializeResult (JSON, bounded by the store), when the
-- record ends, and when the session was last used, coarsely (a replica that
-- sends on the session moves used_at forward at most once a minute). A
-- replica that needs the key and holds no session of its own joins this one
-- instead of initializing another. The replicas' sweeps end upstream the
-- sessions no replica has used for a while (their pools' idle timeout and
-- call timeout and more), and the records that have ended once idle, and
-- delete their rows: a row is deleted only by the sweep that ends its
-- session.

-- +goose Up
CREATE TABLE mcp_upstream_sessions (
    pool_key          text        PRIMARY KEY,
    session           text        NOT NULL,
    protocol_version  text        NOT NULL,
    initialize_result text        NOT NULL,
    created_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    used_at           timestamptz NOT NULL
);

-- The sessions idle longest, which the sweeps claim.
CREATE INDEX mcp_upstream_sessions_used_idx ON mcp_upstream_sessions (used_at);

-- +goose Down
DROP TABLE mcp_upstream_sessions;
