package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// On PostgreSQL a grant that succeeds — the token endpoint's hot path —
// is two round trips on one connection, where core's transaction takes a
// round trip per statement: the first pipelines BEGIN, the grant's
// statements (each conditioned on the code or token, whose values the
// later ones take from the row rather than from the earlier ones'
// results), the audit lock and a read of the log's head; the second the
// audit record and COMMIT. The statements take their locks in core's
// order (client, consent, code, token; see oauth.go). Whenever the first
// round trip finds anything but a grant that may go ahead — no such code
// or token, used, expired, revoked, no consent —, or PostgreSQL asks for
// the transaction again, it is rolled back, and core's transaction runs
// instead: it alone decides every refusal, and writes what one writes (a
// used-up code, a revoked family). Either way the grant is one
// transaction, and commits with its record or not at all.

var (
	// touchCodeConsent and touchTokenConsent are touchConsent of the
	// principal and the client a code or a refresh token was issued to.
	touchCodeConsent = postgresOnly(`UPDATE oauth_consents ` + touchConsentSet("$2") + `
WHERE (principal, client_id) = (SELECT principal, client_id FROM oauth_codes WHERE code_hash = $1)
	AND revoked_at IS NULL`)
	touchTokenConsent = postgresOnly(`UPDATE oauth_consents ` + touchConsentSet("$2") + `
WHERE (principal, client_id) = (SELECT principal, client_id FROM oauth_refresh_tokens WHERE token_hash = $1)
	AND revoked_at IS NULL`)

	// insertCodeRefresh inserts the first refresh token of the family $2
	// of the code $1, which must be redeemed for it; it ends with its
	// family at the latest, as insertRefresh's.
	insertCodeRefresh = postgresOnly(`
INSERT INTO oauth_refresh_tokens (token_hash, family_id, client_id, principal, subject, resource, scope,
	created_at, expires_at, family_expires_at)
SELECT $3, family_id, client_id, principal, subject, resource, scope, $4, least($5::timestamptz, $6::timestamptz), $6
FROM oauth_codes WHERE code_hash = $1 AND family_id = $2`)

	// insertNextRefresh inserts the successor of the token $1, used at
	// $3, with the old token's grant and, unless $6 names an earlier one,
	// its family's end.
	insertNextRefresh = postgresOnly(`
INSERT INTO oauth_refresh_tokens (token_hash, family_id, client_id, principal, subject, resource, scope,
	created_at, expires_at, family_expires_at)
SELECT $2, family_id, client_id, principal, subject, resource, scope, $4,
	least($5::timestamptz, coalesce($6::timestamptz, family_expires_at)), coalesce($6::timestamptz, family_expires_at)
FROM oauth_refresh_tokens WHERE token_hash = $1 AND used_at = $3::timestamptz`)

	// touchCodeClient and touchTokenClient are touchOAuthClient of the
	// client of a code or a refresh token.
	touchCodeClient = postgresOnly(`UPDATE oauth_clients ` + touchClientSet + `
WHERE id = (SELECT client_id FROM oauth_codes WHERE code_hash = $1)`)
	touchTokenClient = postgresOnly(`UPDATE oauth_clients ` + touchClientSet + `
WHERE id = (SELECT client_id FROM oauth_refresh_tokens WHERE token_hash = $1)`)
)

// RedeemAuthorizationCode answers a code grant that asks for the consent
// and its record in two round trips (see the top of this file); anything
// else is core's.
func (s *postgresStore) RedeemAuthorizationCode(ctx context.Context, codeHash, family string, now time.Time, g *TokenGrant) (AuthorizationCode, error) {
	if g == nil || !g.Consent || g.Audit == nil {
		return s.core.RedeemAuthorizationCode(ctx, codeHash, family, now, g)
	}
	if err := checkKeys(now, namedText{"code hash", codeHash, true}, namedText{"family ID", family, true}); err != nil {
		return AuthorizationCode{}, err
	}
	now = storedTime(now)
	if g.Refresh != nil {
		if err := checkFirstRefresh(*g.Refresh, now); err != nil {
			return AuthorizationCode{}, err
		}
	}
	var out AuthorizationCode
	granted, err := s.grantFast(ctx, g.Audit, func(b *pgx.Batch) {
		b.Queue(shareCodeClient.pg, codeHash)
		b.Queue(touchCodeConsent.pg, codeHash, now)
		b.Queue(redeemIssuedOAuthCode.pg, codeHash, now, family)
		if t := g.Refresh; t != nil {
			b.Queue(insertCodeRefresh.pg, codeHash, family, t.TokenHash, createdAt(*t, now), t.ExpiresAt, t.FamilyExpiresAt)
		}
		b.Queue(touchCodeClient.pg, codeHash, now)
	}, func(br pgx.BatchResults) (bool, error) {
		ok, err := readGrantHold(br)
		if err != nil {
			return false, err
		}
		code, err := scanOAuthCode(br.QueryRow())
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			ok = false
		case err != nil:
			return false, err
		}
		out = code
		return readGrantWrites(br, ok, g.Refresh != nil)
	})
	if err != nil {
		// Rolled back: the code as it stays.
		out.UsedAt, out.FamilyID = time.Time{}, ""
	}
	if err != nil || granted {
		return out, err
	}
	return s.core.RedeemAuthorizationCode(ctx, codeHash, family, now, g)
}

// RotateRefreshToken answers a rotation that asks for the consent and its
// record in two round trips (see the top of this file); anything else is
// core's.
func (s *postgresStore) RotateRefreshToken(ctx context.Context, oldHash string, now time.Time, g TokenGrant) (RefreshToken, error) {
	if !g.Consent || g.Audit == nil || g.Refresh == nil {
		return s.core.RotateRefreshToken(ctx, oldHash, now, g)
	}
	if err := checkKeys(now, namedText{"old token hash", oldHash, true}); err != nil {
		return RefreshToken{}, err
	}
	now = storedTime(now)
	next := *g.Refresh
	next.CreatedAt = createdAt(next, now)
	if err := checkRefreshToken(next, true); err != nil {
		return RefreshToken{}, err
	}
	if err := checkRepeat(g, now); err != nil {
		return RefreshToken{}, err
	}
	var old RefreshToken
	granted, err := s.grantFast(ctx, g.Audit, func(b *pgx.Batch) {
		var familyEnd any
		if !next.FamilyExpiresAt.IsZero() {
			familyEnd = storedTime(next.FamilyExpiresAt)
		}
		b.Queue(shareTokenClient.pg, oldHash)
		b.Queue(touchTokenConsent.pg, oldHash, now)
		b.Queue(endRepeatsOf.pg, oldHash)
		b.Queue(useRefreshToken.pg, oldHash, now, next.TokenHash, nullString(g.RepeatSalt), nullTime(g.RepeatUntil))
		b.Queue(insertNextRefresh.pg, oldHash, next.TokenHash, now, next.CreatedAt, next.ExpiresAt, familyEnd)
		b.Queue(touchTokenClient.pg, oldHash, now)
	}, func(br pgx.BatchResults) (bool, error) {
		ok, err := readGrantHold(br)
		if err != nil {
			return false, err
		}
		if _, err := br.Exec(); err != nil {
			return false, err
		}
		used, err := scanRefreshToken(br.QueryRow())
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			ok = false
		case err != nil:
			return false, err
		case ok:
			// The successor as inserted must be the one core would
			// insert: the old token's grant, no later end.
			n := next
			if err := checkSuccessor(used, &n); err != nil {
				return false, err
			}
		}
		old = used
		return readGrantWrites(br, ok, true)
	})
	if err != nil {
		// Rolled back: the token as it stays.
		old.UsedAt, old.SuccessorHash, old.SuccessorSalt, old.RepeatUntil = time.Time{}, "", "", time.Time{}
	}
	if err != nil || granted {
		return old, err
	}
	return s.core.RotateRefreshToken(ctx, oldHash, now, g)
}

// checkFirstRefresh validates the caller's part of the first refresh
// token of a family, t (the rest is the code's).
func checkFirstRefresh(t RefreshToken, now time.Time) error {
	t.CreatedAt = createdAt(t, now)
	if t.FamilyExpiresAt.IsZero() {
		return invalid(errors.New("the first refresh token of a family needs its family's end"))
	}
	return checkRefreshToken(t, true)
}

// createdAt is t's CreatedAt, or now.
func createdAt(t RefreshToken, now time.Time) time.Time {
	if t.CreatedAt.IsZero() {
		return now
	}
	return storedTime(t.CreatedAt)
}

// readGrantHold reads the results of a grant's first statements: its
// client (it must stand) and its consent's touch (it must have touched
// it). ok false: the grant may not go ahead as it is.
func readGrantHold(br pgx.BatchResults) (ok bool, _ error) {
	var clientID, principal string
	var revokedAt time.Time
	err := br.QueryRow().Scan(&clientID, &principal, at(&revokedAt))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return false, err
	default:
		ok = revokedAt.IsZero()
	}
	tag, err := br.Exec()
	if err != nil {
		return false, err
	}
	return ok && tag.RowsAffected() == 1, nil
}

// readGrantWrites reads the results of a grant's last statements: the
// refresh token's insert, when there is one (it must have inserted it),
// and the client's touch.
func readGrantWrites(br pgx.BatchResults, ok, refresh bool) (bool, error) {
	if refresh {
		tag, err := br.Exec()
		if err != nil {
			return false, err
		}
		ok = ok && tag.RowsAffected() == 1
	}
	if _, err := br.Exec(); err != nil {
		return false, err
	}
	return ok, nil
}

// grantFast runs a grant's transaction in two round trips: BEGIN, the
// statements queue queues, the audit lock and the head; then, when read
// says the grant goes ahead, build's record chained to the head and
// COMMIT. It reports whether the grant committed. A grant read says may
// not go ahead, or a transaction PostgreSQL asks to run again, is rolled
// back with no error: the caller runs core's transaction instead.
func (s *postgresStore) grantFast(ctx context.Context, build func(AuditHead) (AuditRecord, error), queue func(*pgx.Batch), read func(pgx.BatchResults) (bool, error)) (bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, s.fail(err)
	}
	defer releaseAfterTx(ctx, conn)
	b := &pgx.Batch{}
	b.Queue("begin")
	queue(b)
	b.Queue(lockAudit.pg)
	b.Queue(auditHead.pg)
	var ok bool
	var head AuditHead
	err = readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		var err error
		if ok, err = read(br); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&head.Seq, &head.Hash); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return nil
	})
	switch {
	case err != nil && pgRetryable(err):
		return false, nil
	case err != nil:
		return false, s.fail(err)
	case !ok:
		_, err := conn.Exec(ctx, "rollback")
		return false, s.fail(err)
	}
	r, err := builtRecord(build, head)
	if err != nil {
		_, _ = conn.Exec(ctx, "rollback")
		return false, s.fail(err)
	}
	b = &pgx.Batch{}
	queueInsertAudit(b, r)
	b.Queue("commit")
	err = readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return readCommit(br)
	})
	switch {
	case err != nil && pgRetryable(err):
		return false, nil
	case err != nil:
		return false, s.fail(err)
	}
	return true, nil
}
