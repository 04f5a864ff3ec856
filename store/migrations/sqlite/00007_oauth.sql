-- Usher's OAuth 2.1 authorization server: its clients, the authorization
-- codes and rotating refresh tokens it issues, and the users' remembered
-- consents; the same logical schema as on PostgreSQL. The rows keep only
-- the SHA-256 of codes and tokens.

-- +goose Up

-- The clients: registered (RFC 7591), metadata documents (CIMD, keyed by
-- the document's URL) and configured ones. metadata is kept byte for byte.
CREATE TABLE oauth_clients (
    id            TEXT NOT NULL PRIMARY KEY,
    kind          TEXT NOT NULL CHECK (kind IN ('registered', 'metadata_document', 'configured')),
    name          TEXT NOT NULL DEFAULT '',
    redirect_uris TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(redirect_uris)),
    grant_types   TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(grant_types)),
    auth_method   TEXT NOT NULL CHECK (auth_method IN ('none', 'client_secret_basic', 'private_key_jwt')),
    secret_hash   TEXT NOT NULL DEFAULT '',
    metadata      TEXT CHECK (metadata IS NULL OR json_valid(metadata)),
    registered_by TEXT NOT NULL DEFAULT '',
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    last_used_at  TEXT,
    revoked_at    TEXT
) STRICT;

-- Registrations per address and time, for the rate limit of dynamic
-- registration.
CREATE INDEX oauth_clients_registered_idx ON oauth_clients (registered_by, created_at);

-- Issued authorization codes. family_id names the refresh-token family a
-- redemption began; replayed_at marks a code presented again after it.
CREATE TABLE oauth_codes (
    code_hash      TEXT NOT NULL PRIMARY KEY,
    client_id      TEXT NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    principal      TEXT NOT NULL,
    subject        TEXT CHECK (subject IS NULL OR json_valid(subject)),
    redirect_uri   TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    resource       TEXT NOT NULL,
    scope          TEXT NOT NULL DEFAULT '',
    created_at     TEXT NOT NULL,
    expires_at     TEXT NOT NULL,
    used_at        TEXT,
    family_id      TEXT,
    replayed_at    TEXT
) STRICT;

-- The code that began a family, for replay detection; codes by deadline,
-- for the sweep.
CREATE INDEX oauth_codes_family_idx ON oauth_codes (family_id);
CREATE INDEX oauth_codes_expires_idx ON oauth_codes (expires_at);

-- Refresh tokens. Every rotation inserts a token of the same family and
-- marks the old one used; presenting a used one revokes the family.
CREATE TABLE oauth_refresh_tokens (
    token_hash        TEXT NOT NULL PRIMARY KEY,
    family_id         TEXT NOT NULL,
    client_id         TEXT NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    principal         TEXT NOT NULL,
    subject           TEXT CHECK (subject IS NULL OR json_valid(subject)),
    resource          TEXT NOT NULL,
    scope             TEXT NOT NULL DEFAULT '',
    created_at        TEXT NOT NULL,
    expires_at        TEXT NOT NULL,
    family_expires_at TEXT NOT NULL,
    used_at           TEXT,
    revoked_at        TEXT
) STRICT;

-- A family's tokens, for its revocation; a client's and a user's, for the
-- revocation of a client or a consent.
CREATE INDEX oauth_refresh_tokens_family_idx ON oauth_refresh_tokens (family_id);
CREATE INDEX oauth_refresh_tokens_client_idx ON oauth_refresh_tokens (client_id, principal);

-- A user's remembered consent to a client.
CREATE TABLE oauth_consents (
    principal    TEXT NOT NULL,
    client_id    TEXT NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    scope        TEXT NOT NULL DEFAULT '',
    resource     TEXT NOT NULL DEFAULT '',
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    last_used_at TEXT NOT NULL,
    revoked_at   TEXT,
    PRIMARY KEY (principal, client_id)
) STRICT;

-- A client's consents, for its revocation.
CREATE INDEX oauth_consents_client_idx ON oauth_consents (client_id);

-- +goose Down
DROP TABLE oauth_consents;
DROP TABLE oauth_refresh_tokens;
DROP TABLE oauth_codes;
DROP TABLE oauth_clients;
