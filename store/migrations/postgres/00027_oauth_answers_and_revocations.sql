-- The answers to consent forms: a form is answered once, Approve or Deny,
-- and any later post of it is refused. request_hash is the SHA-256 of the
-- form's pending request id; a row lives as long as the form could be
-- posted (expires_at), and the sweep deletes it after.

-- +goose Up

CREATE TABLE oauth_consent_answers (
    request_hash text        NOT NULL PRIMARY KEY,
    decision     text        NOT NULL CHECK (decision IN ('approve', 'deny')),
    answered_at  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);

CREATE INDEX oauth_consent_answers_expires_idx ON oauth_consent_answers (expires_at);

-- +goose Down
DROP TABLE oauth_consent_answers;
