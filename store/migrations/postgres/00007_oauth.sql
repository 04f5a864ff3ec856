-- Usher's OAuth 2.1 authorization server: its clients, the authorization
-- codes and rotating refresh tokens it issues, and the users' remembered
-- consents. Codes and tokens are secrets only their holders have: the rows
-- keep their SHA-256, so a copy of the tables grants nothing.

-- +goose Up

-- The clients: registered (RFC 7591), metadata documents (CIMD, keyed by
-- the document's URL) and configured ones. metadata is json, not jsonb:
-- the registration or document is kept byte for byte.
CREATE TABLE oauth_clients (
    id            text        NOT NULL PRIMARY KEY,
    kind          text        NOT NULL CHECK (kind IN ('registered', 'metadata_document', 'configured')),
    name          text        NOT NULL DEFAULT '',
    redirect_uris json        NOT NULL DEFAULT '[]',
    grant_types   json        NOT NULL DEFAULT '[]',
    auth_method   text        NOT NULL CHECK (auth_method IN ('none', 'client_secret_basic', 'private_key_jwt')),
    secret_hash   text        NOT NULL DEFAULT '',
    metadata      json,
    registered_by text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    last_used_at  timestamptz,
    revoked_at    timestamptz
);

-- Registrations per address and time, for the rate limit of dynamic
-- registration.
CREATE INDEX oauth_clients_registered_idx ON oauth_clients (registered_by, created_at);

-- Issued authorization codes. family_id names the refresh-token family a
-- redemption began; replayed_at marks a code presented again after it.
CREATE TABLE oauth_codes (
    code_hash      text        NOT NULL PRIMARY KEY,
    client_id      text        NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    principal      text        NOT NULL,
    subject        json,
    redirect_uri   text        NOT NULL,
    code_challenge text        NOT NULL,
    resource       text        NOT NULL,
    scope          text        NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz,
    family_id      text,
    replayed_at    timestamptz
);

-- The code that began a family, for replay detection; codes by deadline,
-- for the sweep.
CREATE INDEX oauth_codes_family_idx ON oauth_codes (family_id);
CREATE INDEX oauth_codes_expires_idx ON oauth_codes (expires_at);

-- Refresh tokens. Every rotation inserts a token of the same family and
-- marks the old one used; presenting a used one revokes the family.
CREATE TABLE oauth_refresh_tokens (
    token_hash        text        NOT NULL PRIMARY KEY,
    family_id         text        NOT NULL,
    client_id         text        NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    principal         text        NOT NULL,
    subject           json,
    resource          text        NOT NULL,
    scope             text        NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    family_expires_at timestamptz NOT NULL,
    used_at           timestamptz,
    revoked_at        timestamptz
);

-- A family's tokens, for its revocation; a client's and a user's, for the
-- revocation of a client or a consent.
CREATE INDEX oauth_refresh_tokens_family_idx ON oauth_refresh_tokens (family_id);
CREATE INDEX oauth_refresh_tokens_client_idx ON oauth_refresh_tokens (client_id, principal);

-- A user's remembered consent to a client.
CREATE TABLE oauth_consents (
    principal    text        NOT NULL,
    client_id    text        NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    scope        text        NOT NULL DEFAULT '',
    resource     text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    last_used_at timestamptz NOT NULL,
    revoked_at   timestamptz,
    PRIMARY KEY (principal, client_id)
);

-- A client's consents, for its revocation.
CREATE INDEX oauth_consents_client_idx ON oauth_consents (client_id);

-- +goose Down
DROP TABLE oauth_consents;
DROP TABLE oauth_refresh_tokens;
DROP TABLE oauth_codes;
DROP TABLE oauth_clients;
