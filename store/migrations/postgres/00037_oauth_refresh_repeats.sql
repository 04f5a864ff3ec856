-- A refresh token presented again shortly after its rotation — two
-- refreshes of one client at once, or a retry whose first answer was lost
-- — is answered again with the same successor, rather than taken for a
-- copy in someone else's hands (RotateRefreshToken). A rotated token
-- names its successor (successor_hash) and, until repeat_until, keeps the
-- salt from which the server derived it (successor_salt): the successor is
-- an HMAC of the rotated token and the salt under a key of the server's
-- secret, so neither the database nor the key alone can derive it. The
-- salt is cleared when the successor is used or revoked, and after
-- repeat_until by the sweep (EndRefreshRepeats), which finds it by index.

-- +goose Up
ALTER TABLE oauth_refresh_tokens
    ADD COLUMN successor_hash TEXT,
    ADD COLUMN successor_salt TEXT,
    ADD COLUMN repeat_until TIMESTAMPTZ;

CREATE INDEX oauth_refresh_tokens_successor_idx ON oauth_refresh_tokens (successor_hash)
    WHERE successor_salt IS NOT NULL;
CREATE INDEX oauth_refresh_tokens_repeat_idx ON oauth_refresh_tokens (repeat_until)
    WHERE successor_salt IS NOT NULL;

-- +goose Down
DROP INDEX oauth_refresh_tokens_repeat_idx;
DROP INDEX oauth_refresh_tokens_successor_idx;
ALTER TABLE oauth_refresh_tokens
    DROP COLUMN repeat_until,
    DROP COLUMN successor_salt,
    DROP COLUMN successor_hash;
