-- When a shared upstream session was last used, coarsely: a replica that
-- sends on the session moves used_at forward at most once a minute. The
-- replicas' sweeps end upstream the sessions no replica has used for a
-- while (their pools' idle timeout and call timeout and more), and the
-- records that have ended once idle, and delete their rows: a row is
-- deleted only by the sweep that ends its session. A record written
-- before this migration was last used when it was created. The same
-- logical schema as on PostgreSQL; a NOT NULL column without a default
-- is added by rebuilding the table.

-- +goose Up
CREATE TABLE mcp_upstream_sessions_next (
    pool_key          TEXT NOT NULL PRIMARY KEY,
    session           TEXT NOT NULL,
    protocol_version  TEXT NOT NULL,
    initialize_result TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    expires_at        TEXT NOT NULL,
    used_at           TEXT NOT NULL
) STRICT;
INSERT INTO mcp_upstream_sessions_next
SELECT pool_key, session, protocol_version, initialize_result, created_at, expires_at, created_at FROM mcp_upstream_sessions;
DROP TABLE mcp_upstream_sessions;
ALTER TABLE mcp_upstream_sessions_next RENAME TO mcp_upstream_sessions;

-- The sessions idle longest, which the sweeps claim.
CREATE INDEX mcp_upstream_sessions_used_idx ON mcp_upstream_sessions (used_at);

-- +goose Down
CREATE TABLE mcp_upstream_sessions_prev (
    pool_key          TEXT NOT NULL PRIMARY KEY,
    session           TEXT NOT NULL,
    protocol_version  TEXT NOT NULL,
    initialize_result TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    expires_at        TEXT NOT NULL
) STRICT;
INSERT INTO mcp_upstream_sessions_prev
SELECT pool_key, session, protocol_version, initialize_result, created_at, expires_at FROM mcp_upstream_sessions;
DROP TABLE mcp_upstream_sessions;
ALTER TABLE mcp_upstream_sessions_prev RENAME TO mcp_upstream_sessions;
CREATE INDEX mcp_upstream_sessions_expires_idx ON mcp_upstream_sessions (expires_at);
