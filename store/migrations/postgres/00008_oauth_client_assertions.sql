-- The client assertions (private_key_jwt, RFC 7523 §2.2) the authorization
-- server accepted, by their client and jti, until they expire: each is
-- single use, across replicas.

-- +goose Up

CREATE TABLE oauth_client_assertions (
    client_id  text        NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
    jti        text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (client_id, jti)
);

-- Assertions by deadline, for the sweep.
CREATE INDEX oauth_client_assertions_expires_idx ON oauth_client_assertions (expires_at);

-- +goose Down
DROP TABLE oauth_client_assertions;
