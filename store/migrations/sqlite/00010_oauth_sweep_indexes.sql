-- The refresh tokens the sweep deletes (DeleteExpiredOAuth), found by
-- index rather than by reading the whole table: those expired, and those
-- used or revoked long enough ago. A token never outlives its family
-- (expires_at <= family_expires_at), so its own end finds it.

-- +goose Up

CREATE INDEX oauth_refresh_tokens_expires_idx ON oauth_refresh_tokens (expires_at);
CREATE INDEX oauth_refresh_tokens_used_idx ON oauth_refresh_tokens (used_at) WHERE used_at IS NOT NULL;
CREATE INDEX oauth_refresh_tokens_revoked_idx ON oauth_refresh_tokens (revoked_at) WHERE revoked_at IS NOT NULL;

-- +goose Down
DROP INDEX oauth_refresh_tokens_revoked_idx;
DROP INDEX oauth_refresh_tokens_used_idx;
DROP INDEX oauth_refresh_tokens_expires_idx;
