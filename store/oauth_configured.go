package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// The authorization server's clients of Usher's configuration, and the
// client assertions (private_key_jwt) it accepted: each assertion's jti is
// recorded until the assertion expires, so that it is used once across
// replicas.

// ClientChange says what PutConfiguredClient changed.
type ClientChange string

// What PutConfiguredClient may change.
const (
	// ClientUnchanged: the stored client already had the registration.
	ClientUnchanged ClientChange = ""
	// ClientCreated: there was no client of that id.
	ClientCreated ClientChange = "created"
	// ClientUpdated: the stored client's registration differed.
	ClientUpdated ClientChange = "updated"
)

var (
	// lockConfiguredClient reads the client a put may change, locked
	// first as a revocation locks it (see oauth.go's lock order).
	lockConfiguredClient = sql1(`SELECT ` + oauthClientColumns + ` FROM oauth_clients WHERE id = $1 FOR UPDATE`)

	// insertConfiguredClient returns no row when the id is taken (by a
	// concurrent put of the same client, once the read found none).
	insertConfiguredClient = sql1(`
INSERT INTO oauth_clients (id, kind, name, redirect_uris, grant_types, auth_method, secret_hash, metadata,
	registered_by, created_at, updated_at)
VALUES ($1, 'configured', $2, $3, $4, $5, $6, $7, '', $8, $9)
ON CONFLICT (id) DO NOTHING
RETURNING ` + oauthClientColumns)

	// updateConfiguredClient replaces a configured client's registration;
	// revoked_at, created_at and last_used_at are kept.
	updateConfiguredClient = sql1(`
UPDATE oauth_clients SET name = $2, redirect_uris = $3, grant_types = $4, auth_method = $5, secret_hash = $6,
	metadata = $7, updated_at = $8
WHERE id = $1 AND kind = 'configured'
RETURNING ` + oauthClientColumns)

	// deleteClientAssertions deletes a client's assertions expired at $2.
	deleteClientAssertions = sql1(`DELETE FROM oauth_client_assertions WHERE client_id = $1 AND expires_at <= $2`)

	// insertClientAssertion changes no row when the jti is recorded.
	insertClientAssertion = sql1(`
INSERT INTO oauth_client_assertions (client_id, jti, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (client_id, jti) DO NOTHING`)

	// deleteExpiredClientAssertions is DeleteExpiredClientAssertions'.
	deleteExpiredClientAssertions = sql1(`DELETE FROM oauth_client_assertions WHERE expires_at <= $1`)
)

func (c *core) PutConfiguredClient(ctx context.Context, cl OAuthClient, audit func(prev *OAuthClient) func(AuditHead) (AuditRecord, error)) (OAuthClient, ClientChange, error) {
	if cl.Kind == "" {
		cl.Kind = OAuthClientConfigured
	}
	cl = clientTimes(cl, c.now())
	err := checkOAuthClient(cl)
	if err == nil && (cl.Kind != OAuthClientConfigured || cl.RegisteredBy != "") {
		err = invalid(fmt.Errorf("PutConfiguredClient writes a configured client, not a %s one registered by %q", cl.Kind, cl.RegisteredBy))
	}
	if err != nil {
		return OAuthClient{}, ClientUnchanged, err
	}
	redirects, grants := string(encodeNames(cl.RedirectURIs)), string(encodeNames(cl.GrantTypes))
	var out OAuthClient
	var change ClientChange
	err = c.inTx(ctx, func(tx executor) error {
		change = ClientUnchanged
		prev, err := scanOAuthClient(tx.row(ctx, lockConfiguredClient, cl.ID))
		if errors.Is(err, sql.ErrNoRows) {
			out, err = scanOAuthClient(tx.row(ctx, insertConfiguredClient, cl.ID, cl.Name, redirects, grants, cl.AuthMethod,
				cl.SecretHash, nullJSON(cl.Metadata), storedTime(cl.CreatedAt), storedTime(cl.UpdatedAt)))
			if err == nil {
				change = ClientCreated
				return appendClientChange(ctx, tx, audit, nil)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			// A concurrent put created it, and has committed.
			prev, err = scanOAuthClient(tx.row(ctx, lockConfiguredClient, cl.ID))
		}
		switch {
		case err != nil:
			return err
		case prev.Kind != OAuthClientConfigured:
			return ErrConflict
		case sameRegistration(prev, cl):
			out = prev
			return nil
		}
		out, err = scanOAuthClient(tx.row(ctx, updateConfiguredClient, cl.ID, cl.Name, redirects, grants, cl.AuthMethod,
			cl.SecretHash, nullJSON(cl.Metadata), storedTime(cl.UpdatedAt)))
		if err != nil {
			return err
		}
		change = ClientUpdated
		return appendClientChange(ctx, tx, audit, &prev)
	})
	if err != nil {
		return OAuthClient{}, ClientUnchanged, c.fail(err)
	}
	return out, change, nil
}

// appendClientChange appends, in tx, the audit record of a configured
// client's creation (prev nil) or update, when audit asks for one.
func appendClientChange(ctx context.Context, tx executor, audit func(prev *OAuthClient) func(AuditHead) (AuditRecord, error), prev *OAuthClient) error {
	if audit == nil {
		return nil
	}
	build := audit(prev)
	if build == nil {
		return nil
	}
	_, err := appendAuditTx(ctx, tx, build)
	return err
}

// sameRegistration reports whether the stored client a has the
// registration of b: what PutConfiguredClient would replace.
func sameRegistration(a, b OAuthClient) bool {
	return a.Name == b.Name && slices.Equal(a.RedirectURIs, b.RedirectURIs) && slices.Equal(a.GrantTypes, b.GrantTypes) &&
		a.AuthMethod == b.AuthMethod && a.SecretHash == b.SecretHash && sameJSON(a.Metadata, b.Metadata)
}

// sameJSON reports whether a and b (either may be empty, for none) are the
// same JSON value: PostgreSQL's driver stores a value compacted, so the
// bytes read back may differ from the bytes put.
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
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
