package store

import (
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
