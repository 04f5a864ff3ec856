package store

import (
	"context"
	"database/sql"
	"time"
)

const (
	sqliteCreateBrowserSession = `
INSERT INTO browser_sessions (id_hash, principal, created_at, expires_at) VALUES (?, ?, ?, ?)
RETURNING ` + browserSessionColumns

	sqliteGetBrowserSession = `SELECT ` + browserSessionColumns + ` FROM browser_sessions WHERE id_hash = ?`

	// sqliteRevokeBrowserSession keeps the first revocation's time.
	sqliteRevokeBrowserSession = `
UPDATE browser_sessions SET revoked_at = coalesce(revoked_at, ?2) WHERE id_hash = ?1`

	sqliteRevokeBrowserSessions = `
UPDATE browser_sessions SET revoked_at = ?2
WHERE principal = ?1 AND revoked_at IS NULL AND expires_at > ?2`

	// Times are fixed-width UTC text: comparing the text compares them.
	sqliteDeleteBrowserSessions = `
DELETE FROM browser_sessions WHERE expires_at <= ?1 OR revoked_at <= ?1`
)

func (s *sqliteStore) CreateBrowserSession(ctx context.Context, b BrowserSession) (BrowserSession, error) {
	if b.CreatedAt.IsZero() {
		b.CreatedAt = s.now()
	}
	if err := checkBrowserSession(b); err != nil {
		return BrowserSession{}, err
	}
	var out BrowserSession
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanSQLiteBrowserSession(tx.QueryRowContext(ctx, sqliteCreateBrowserSession,
			b.IDHash, b.Principal, sqliteTime(b.CreatedAt), sqliteTime(b.ExpiresAt)))
		return err
	})
	if err != nil {
		return BrowserSession{}, sqliteError(err)
	}
	return out, nil
}

func (s *sqliteStore) GetBrowserSession(ctx context.Context, idHash string) (BrowserSession, error) {
	out, err := scanSQLiteBrowserSession(s.read.QueryRowContext(ctx, sqliteGetBrowserSession, idHash))
	if err != nil {
		return BrowserSession{}, sqliteError(err)
	}
	return out, nil
}

func (s *sqliteStore) RevokeBrowserSession(ctx context.Context, idHash string, now time.Time) error {
	if err := invalid(checkNow(now)); err != nil {
		return err
	}
	n, err := s.execCount(ctx, sqliteRevokeBrowserSession, idHash, sqliteTime(now))
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func (s *sqliteStore) RevokeBrowserSessions(ctx context.Context, principal string, now time.Time) (int, error) {
	if err := invalid(checkNow(now)); err != nil {
		return 0, err
	}
	return s.execCount(ctx, sqliteRevokeBrowserSessions, principal, sqliteTime(now))
}

func (s *sqliteStore) DeleteBrowserSessions(ctx context.Context, before time.Time) (int, error) {
	if err := invalid(checkNow(before)); err != nil {
		return 0, err
	}
	return s.execCount(ctx, sqliteDeleteBrowserSessions, sqliteTime(before))
}

// scanSQLiteBrowserSession reads one row of browserSessionColumns.
func scanSQLiteBrowserSession(row interface{ Scan(...any) error }) (BrowserSession, error) {
	var b BrowserSession
	var createdAt, expiresAt string
	var revokedAt sql.NullString
	if err := row.Scan(&b.IDHash, &b.Principal, &createdAt, &expiresAt, &revokedAt); err != nil {
		return BrowserSession{}, err
	}
	var tp sqliteTimeParser
	b.CreatedAt = tp.parse(createdAt)
	b.ExpiresAt = tp.parse(expiresAt)
	b.RevokedAt = tp.parseNull(revokedAt)
	return b, tp.err
}
