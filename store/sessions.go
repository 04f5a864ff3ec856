package store

import (
	"context"
	"errors"
	"time"
)

// BrowserSession is a signed-in browser, kept in the database so that
// signing out ends it on every replica. The session's id is a secret only
// the browser's cookie holds; the store keeps its SHA-256.
type BrowserSession struct {
	// IDHash is the SHA-256 of the session's id, hex-encoded: the key.
	IDHash string
	// Principal is the signed-in person's principal id.
	Principal string
	CreatedAt time.Time
	// ExpiresAt is when the sign-in ends, whatever happens before.
	ExpiresAt time.Time
	// RevokedAt is when it was signed out; zero while it is not.
	RevokedAt time.Time
}

// Active reports whether the session still signs its browser in at now.
func (s BrowserSession) Active(now time.Time) bool {
	return s.RevokedAt.IsZero() && now.Before(s.ExpiresAt)
}

// browserSessionColumns is the column list of a BrowserSession, in field
// order.
const browserSessionColumns = `id_hash, principal, created_at, expires_at, revoked_at`

// checkBrowserSession validates a session CreateBrowserSession writes.
func checkBrowserSession(s BrowserSession) error {
	var errs []error
	if s.IDHash == "" {
		errs = append(errs, errors.New("browser session IDHash is empty"))
	}
	if s.Principal == "" {
		errs = append(errs, errors.New("browser session principal is empty"))
	}
	if s.ExpiresAt.IsZero() {
		errs = append(errs, errors.New("browser session ExpiresAt is zero"))
	} else if !s.ExpiresAt.After(s.CreatedAt) {
		errs = append(errs, errors.New("browser session ExpiresAt is not after CreatedAt"))
	}
	if !s.RevokedAt.IsZero() {
		errs = append(errs, errors.New("a new browser session cannot be revoked"))
	}
	errs = append(errs,
		checkText("browser session IDHash", s.IDHash),
		checkText("browser session principal", s.Principal),
		checkTime("browser session CreatedAt", s.CreatedAt),
		checkTime("browser session ExpiresAt", s.ExpiresAt))
	return invalid(errs...)
}

var (
	insertBrowserSession = sql1(`
INSERT INTO browser_sessions (id_hash, principal, created_at, expires_at) VALUES ($1, $2, $3, $4)
RETURNING ` + browserSessionColumns)

	getBrowserSession = sql1(`SELECT ` + browserSessionColumns + ` FROM browser_sessions WHERE id_hash = $1`)

	// revokeBrowserSession keeps the first revocation's time.
	revokeBrowserSession = sql1(`
UPDATE browser_sessions SET revoked_at = coalesce(revoked_at, $2) WHERE id_hash = $1`)

	revokePrincipalSessions = sql1(`
UPDATE browser_sessions SET revoked_at = $2
WHERE principal = $1 AND revoked_at IS NULL AND expires_at > $2`)

	// deleteBrowserSessions compares times, which SQLite stores as
	// fixed-width UTC text: comparing the text compares them.
	deleteBrowserSessions = sql1(`
DELETE FROM browser_sessions WHERE expires_at <= $1 OR revoked_at <= $1`)
)

func (c *core) CreateBrowserSession(ctx context.Context, b BrowserSession) (BrowserSession, error) {
	if b.CreatedAt.IsZero() {
		b.CreatedAt = c.now()
	}
	if err := checkBrowserSession(b); err != nil {
		return BrowserSession{}, err
	}
	var out BrowserSession
	err := c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanBrowserSession(x.row(ctx, insertBrowserSession,
			b.IDHash, b.Principal, storedTime(b.CreatedAt), storedTime(b.ExpiresAt)))
		return err
	})
	if err != nil {
		return BrowserSession{}, c.fail(err)
	}
	return out, nil
}

func (c *core) GetBrowserSession(ctx context.Context, idHash string) (BrowserSession, error) {
	out, err := scanBrowserSession(c.reader().row(ctx, getBrowserSession, idHash))
	if err != nil {
		return BrowserSession{}, c.fail(err)
	}
	return out, nil
}

func (c *core) RevokeBrowserSession(ctx context.Context, idHash string, now time.Time) error {
	if err := invalid(checkNow(now)); err != nil {
		return err
	}
	return c.fail(c.writeOne(ctx, func(x executor) error {
		n, err := x.exec(ctx, revokeBrowserSession, idHash, storedTime(now))
		if err == nil && n == 0 {
			err = ErrNotFound
		}
		return err
	}))
}

func (c *core) RevokeBrowserSessions(ctx context.Context, principal string, now time.Time) (int, error) {
	if err := invalid(checkNow(now)); err != nil {
		return 0, err
	}
	return c.changeSessions(ctx, revokePrincipalSessions, principal, storedTime(now))
}

func (c *core) DeleteBrowserSessions(ctx context.Context, before time.Time) (int, error) {
	if err := invalid(checkNow(before)); err != nil {
		return 0, err
	}
	return c.changeSessions(ctx, deleteBrowserSessions, storedTime(before))
}

// changeSessions runs s, a write of one statement to browser sessions,
// and returns how many it changed.
func (c *core) changeSessions(ctx context.Context, s stmt, args ...any) (int, error) {
	var n int64
	err := c.writeOne(ctx, func(x executor) (err error) {
		n, err = x.exec(ctx, s, args...)
		return err
	})
	if err != nil {
		return 0, c.fail(err)
	}
	return int(n), nil
}

// scanBrowserSession reads one row of browserSessionColumns.
func scanBrowserSession(row rowScanner) (BrowserSession, error) {
	var b BrowserSession
	err := row.Scan(&b.IDHash, &b.Principal, at(&b.CreatedAt), at(&b.ExpiresAt), at(&b.RevokedAt))
	return b, err
}
