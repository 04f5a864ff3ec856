-- When a shared upstream session was last used, coarsely: a replica that
-- sends on the session moves used_at forward at most once a minute. The
-- replicas' sweeps end upstream the sessions no replica has used for a
-- while (their pools' idle timeout and call timeout and more), and the
-- records that have ended once idle, and delete their rows: a row is
-- deleted only by the sweep that ends its session. A record written
-- before this migration was last used when it was created.

-- +goose Up
ALTER TABLE mcp_upstream_sessions ADD COLUMN used_at timestamptz;
UPDATE mcp_upstream_sessions SET used_at = created_at;
ALTER TABLE mcp_upstream_sessions ALTER COLUMN used_at SET NOT NULL;

-- The sessions idle longest, which the sweeps claim.
DROP INDEX mcp_upstream_sessions_expires_idx;
CREATE INDEX mcp_upstream_sessions_used_idx ON mcp_upstream_sessions (used_at);

-- +goose Down
DROP INDEX mcp_upstream_sessions_used_idx;
CREATE INDEX mcp_upstream_sessions_expires_idx ON mcp_upstream_sessions (expires_at);
ALTER TABLE mcp_upstream_sessions DROP COLUMN used_at;
