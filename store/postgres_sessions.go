package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	pgCreateBrowserSession = `
INSERT INTO browser_sessions (id_hash, principal, created_at, expires_at) VALUES ($1, $2, $3, $4)
RETURNING ` + browserSessionColumns

	pgGetBrowserSession = `SELECT ` + browserSessionColumns + ` FROM browser_sessions WHERE id_hash = $1`

	// pgRevokeBrowserSession keeps the first revocation's time.
	pgRevokeBrowserSession = `
UPDATE browser_sessions SET revoked_at = coalesce(revoked_at, $2) WHERE id_hash = $1`

	pgRevokeBrowserSessions = `
UPDATE browser_sessions SET revoked_at = $2
WHERE principal = $1 AND revoked_at IS NULL AND expires_at > $2`

	pgDeleteBrowserSessions = `
DELETE FROM browser_sessions WHERE expires_at <= $1 OR revoked_at <= $1`
)

func (s *postgresStore) CreateBrowserSession(ctx context.Context, b BrowserSession) (BrowserSession, error) {
	if b.CreatedAt.IsZero() {
		b.CreatedAt = s.now()
	}
	if err := checkBrowserSession(b); err != nil {
		return BrowserSession{}, err
	}
	out, err := scanPostgresBrowserSession(s.pool.QueryRow(ctx, pgCreateBrowserSession,
		b.IDHash, b.Principal, storedTime(b.CreatedAt), storedTime(b.ExpiresAt)))
	if err != nil {
		return BrowserSession{}, pgError(err)
	}
	return out, nil
}

func (s *postgresStore) GetBrowserSession(ctx context.Context, idHash string) (BrowserSession, error) {
	out, err := scanPostgresBrowserSession(s.pool.QueryRow(ctx, pgGetBrowserSession, idHash))
	if err != nil {
		return BrowserSession{}, pgError(err)
	}
	return out, nil
}

func (s *postgresStore) RevokeBrowserSession(ctx context.Context, idHash string, now time.Time) error {
	if err := invalid(checkNow(now)); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, pgRevokeBrowserSession, idHash, storedTime(now))
	if err != nil {
		return pgError(err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

func (s *postgresStore) RevokeBrowserSessions(ctx context.Context, principal string, now time.Time) (int, error) {
	if err := invalid(checkNow(now)); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, pgRevokeBrowserSessions, principal, storedTime(now))
	if err != nil {
		return 0, pgError(err)
	}
	return int(tag.RowsAffected()), nil
}

func (s *postgresStore) DeleteBrowserSessions(ctx context.Context, before time.Time) (int, error) {
	if err := invalid(checkNow(before)); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, pgDeleteBrowserSessions, storedTime(before))
	if err != nil {
		return 0, pgError(err)
	}
	return int(tag.RowsAffected()), nil
}

// scanPostgresBrowserSession reads one row of browserSessionColumns.
func scanPostgresBrowserSession(row pgx.Row) (BrowserSession, error) {
	var b BrowserSession
	var revokedAt *time.Time
	if err := row.Scan(&b.IDHash, &b.Principal, &b.CreatedAt, &b.ExpiresAt, &revokedAt); err != nil {
		return BrowserSession{}, err
	}
	b.CreatedAt, b.ExpiresAt, b.RevokedAt = b.CreatedAt.UTC(), b.ExpiresAt.UTC(), pgTimeOrZero(revokedAt)
	return b, nil
}
