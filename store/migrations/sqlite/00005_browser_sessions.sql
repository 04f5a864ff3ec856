-- Signed-in browsers, kept server-side so that signing out ends a session
-- on every replica; the same logical schema as on PostgreSQL. The row holds
-- only the SHA-256 of the session's id.

-- +goose Up
CREATE TABLE browser_sessions (
    id_hash    TEXT NOT NULL PRIMARY KEY,
    principal  TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    revoked_at TEXT
) STRICT;

-- A person's sessions, for "sign out everywhere".
CREATE INDEX browser_sessions_principal_idx ON browser_sessions (principal);
-- Sessions by deadline, for the sweep that deletes ended ones.
CREATE INDEX browser_sessions_expires_idx ON browser_sessions (expires_at);

-- +goose Down
DROP TABLE browser_sessions;
