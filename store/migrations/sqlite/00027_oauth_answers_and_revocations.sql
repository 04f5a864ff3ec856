-- The answers to consent forms: a form is answered once, Approve or Deny,
-- and any later post of it is refused; the same logical schema as on
-- PostgreSQL. request_hash is the SHA-256 of the form's pending request
-- id; a row lives as long as the form could be posted (expires_at), and
-- the sweep deletes it after.

-- +goose Up

CREATE TABLE oauth_consent_answers (
    request_hash TEXT NOT NULL PRIMARY KEY,
    decision     TEXT NOT NULL CHECK (decision IN ('approve', 'deny')),
    answered_at  TEXT NOT NULL,
    expires_at   TEXT NOT NULL
) STRICT;

CREATE INDEX oauth_consent_answers_expires_idx ON oauth_consent_answers (expires_at);

-- +goose Down
DROP TABLE oauth_consent_answers;
