-- Signed-in browsers, kept server-side so that signing out ends a session
-- on every replica. The cookie holds the session's id; the row holds only
-- its SHA-256, so a copy of the table signs nobody in.

-- +goose Up
CREATE TABLE browser_sessions (
    id_hash    text        NOT NULL PRIMARY KEY,
    principal  text        NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);

-- A person's sessions, for "sign out everywhere".
CREATE INDEX browser_sessions_principal_idx ON browser_sessions (principal);
-- Sessions by deadline, for the sweep that deletes ended ones.
CREATE INDEX browser_sessions_expires_idx ON browser_sessions (expires_at);

-- +goose Down
DROP TABLE browser_sessions;
