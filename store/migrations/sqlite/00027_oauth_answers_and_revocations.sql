-- The answers to consent forms, and the grants revoked.
--
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

-- The revoked grants: the refresh-token families revoked (a replayed
-- code, a reused refresh token, a revocation), whose access tokens, which
-- carry the family as grant_id, are refused from then on. A row is kept
-- as long as such a token could still be unexpired.
CREATE TABLE oauth_revoked_grants (
    family_id  TEXT NOT NULL PRIMARY KEY,
    revoked_at TEXT NOT NULL
) STRICT;

CREATE INDEX oauth_revoked_grants_revoked_idx ON oauth_revoked_grants (revoked_at);

-- +goose Down
DROP TABLE oauth_revoked_grants;
DROP TABLE oauth_consent_answers;
