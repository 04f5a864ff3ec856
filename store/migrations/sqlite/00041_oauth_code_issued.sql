-- issued_at: when an authorization code's redemption issued tokens. NULL
-- for a code not redeemed, and for one whose redemption was refused (a
-- wrong code_verifier, another client, a revoked consent): presented
-- again, such a code is no replay of tokens issued, and revokes nothing.
-- Codes redeemed before are taken to have issued theirs.

-- +goose Up
ALTER TABLE oauth_codes ADD COLUMN issued_at TEXT;
UPDATE oauth_codes SET issued_at = used_at WHERE used_at IS NOT NULL;

-- +goose Down
ALTER TABLE oauth_codes DROP COLUMN issued_at;
