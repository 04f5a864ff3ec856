package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The authorization server's clients of Usher's configuration, and the
// client assertions (private_key_jwt) it accepted: each assertion's jti is
// recorded until the assertion expires, so that it is used once across
// replicas.

var (
	// putConfiguredClient updates only a configured client: a client of
	// another kind under the same id makes it return no row. revoked_at,
	// created_at and last_used_at are kept.
	putConfiguredClient = sql1(`
INSERT INTO oauth_clients (id, kind, name, redirect_uris, grant_types, auth_method, secret_hash, metadata,
	registered_by, created_at, updated_at)
VALUES ($1, 'configured', $2, $3, $4, $5, $6, $7, '', $8, $9)
ON CONFLICT (id) DO UPDATE SET name = excluded.name, redirect_uris = excluded.redirect_uris,
	grant_types = excluded.grant_types, auth_method = excluded.auth_method, secret_hash = excluded.secret_hash,
	metadata = excluded.metadata, updated_at = excluded.updated_at
	WHERE oauth_clients.kind = 'configured'
RETURNING ` + oauthClientColumns)

	// deleteClientAssertions deletes a client's assertions expired at $2.
	deleteClientAssertions = sql1(`DELETE FROM oauth_client_assertions WHERE client_id = $1 AND expires_at <= $2`)

	// insertClientAssertion changes no row when the jti is recorded.
	insertClientAssertion = sql1(`
INSERT INTO oauth_client_assertions (client_id, jti, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (client_id, jti) DO NOTHING`)

	// deleteExpiredClientAssertions is DeleteExpiredOAuth's and
	// DeleteExpiredClientAssertions'.
	deleteExpiredClientAssertions = sql1(`DELETE FROM oauth_client_assertions WHERE expires_at <= $1`)
)

func (c *core) PutConfiguredClient(ctx context.Context, cl OAuthClient) (OAuthClient, error) {
	if cl.Kind == "" {
		cl.Kind = OAuthClientConfigured
	}
	cl = clientTimes(cl, c.now())
	err := checkOAuthClient(cl)
	if err == nil && (cl.Kind != OAuthClientConfigured || cl.RegisteredBy != "") {
		err = invalid(fmt.Errorf("PutConfiguredClient writes a configured client, not a %s one registered by %q", cl.Kind, cl.RegisteredBy))
	}
	if err != nil {
		return OAuthClient{}, err
	}
	var out OAuthClient
	err = c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanOAuthClient(x.row(ctx, putConfiguredClient, cl.ID, cl.Name,
			string(encodeNames(cl.RedirectURIs)), string(encodeNames(cl.GrantTypes)), cl.AuthMethod, cl.SecretHash,
			nullJSON(cl.Metadata), storedTime(cl.CreatedAt), storedTime(cl.UpdatedAt)))
		if errors.Is(err, sql.ErrNoRows) {
			// The id is a client of another kind.
			return ErrConflict
		}
		return err
	})
	if err != nil {
		return OAuthClient{}, c.fail(err)
	}
	return out, nil
}

func (c *core) UseClientAssertion(ctx context.Context, clientID, jti string, expiresAt, now time.Time) error {
	err := checkKeys(now, namedText{"client ID", clientID, true}, namedText{"assertion jti", jti, true})
	if err == nil {
		err = invalid(checkLifetime("client assertion", now, expiresAt))
	}
	if err != nil {
		return err
	}
	return c.fail(c.inTx(ctx, func(tx executor) error {
		// The client's expired assertions go first: the table holds only
		// what can still be replayed, and an expired jti may come again.
		if _, err := tx.exec(ctx, deleteClientAssertions, clientID, storedTime(now)); err != nil {
			return err
		}
		n, err := tx.exec(ctx, insertClientAssertion, clientID, jti, storedTime(expiresAt))
		if err == nil && n == 0 {
			return ErrConflict
		}
		return err
	}))
}

func (c *core) DeleteExpiredClientAssertions(ctx context.Context, before time.Time) (int, error) {
	if err := invalid(checkNow(before)); err != nil {
		return 0, err
	}
	var n int64
	err := c.writeOne(ctx, func(x executor) (err error) {
		n, err = x.exec(ctx, deleteExpiredClientAssertions, storedTime(before))
		return err
	})
	if err != nil {
		return 0, c.fail(err)
	}
	return int(n), nil
}
