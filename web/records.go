package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// Every sign-in is a row of the store as well as a sealed cookie: the
// cookie carries the session's id (256 random bits) and the principal, the
// row the id's SHA-256, the principal and whether it was signed out. A
// request is let in only when both agree, so signing out — one session or
// all of a person's — ends the session on every replica, not only in the
// browser that asked.
//
// Each replica remembers its checks for RevocationTTL in a bounded cache,
// so a busy page costs one query per session per TTL; the replica that
// signs a session out forgets it at once, the others within the TTL.

// maxCachedChecks bounds the cache of checks; beyond it, the checks older
// than the TTL are dropped, and when none is, all of them.
const maxCachedChecks = 10_000

// errSessionStore is a check the store could not answer: the request is
// refused (fail closed), but the session is not thrown away.
var errSessionStore = httpx.Errorf(http.StatusServiceUnavailable, "session_check_failed",
	"Your session could not be checked just now. Try again in a moment.")

// newSessionID returns a fresh session id: 256 random bits, base64url.
func newSessionID() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// hashSessionID is the key of a session's row: the hex SHA-256 of its id,
// so that the table signs nobody in.
func hashSessionID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// logID names a session in logs without giving it away: a prefix of the
// hash of its id.
func (s session) logID() string { return hashSessionID(s.ID)[:16] }

// handle is the session's identifier for other handlers ([Sessions.SignedIn]):
// the hex SHA-256 of its id under a label of its own, so that it is neither
// the id nor its row's key (hashSessionID), and knowing it signs nobody in
// nor finds the row.
func (s session) handle() string {
	sum := sha256.Sum256([]byte("usher/web/session-handle\x00" + s.ID))
	return hex.EncodeToString(sum[:])
}

// check is what a replica last learnt of a session from the store.
type check struct {
	principal string
	active    bool
	at        time.Time
}

// checks is the bounded cache of checks, by id hash.
type checks struct {
	ttl time.Duration

	mu      sync.Mutex
	entries map[string]check
}

func (c *checks) get(idHash string, now time.Time) (check, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[idHash]
	if !ok || now.Sub(e.at) >= c.ttl || now.Before(e.at) {
		return check{}, false
	}
	return e, true
}

func (c *checks) put(idHash string, e check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[idHash]; !ok && len(c.entries) >= maxCachedChecks {
		for k, old := range c.entries {
			if e.at.Sub(old.at) >= c.ttl {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCachedChecks {
			clear(c.entries)
		}
	}
	c.entries[idHash] = e
}

// forget drops the check of one session, or of every session of
// principal when idHash is empty.
func (c *checks) forget(idHash, principal string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if idHash != "" {
		delete(c.entries, idHash)
		return
	}
	for k, e := range c.entries {
		if e.principal == principal {
			delete(c.entries, k)
		}
	}
}

// record stores a new session's row.
func (s *Sessions) record(ctx context.Context, sess session) error {
	_, err := s.o.Store.CreateBrowserSession(ctx, store.BrowserSession{
		IDHash:    hashSessionID(sess.ID),
		Principal: sess.principal().ID(),
		CreatedAt: time.Unix(sess.SignedIn, 0),
		ExpiresAt: time.Unix(sess.Expires, 0),
	})
	return err
}

// active reports whether the store still has sess signed in, from the
// cache when its check is recent. An error is a store that did not
// answer.
func (s *Sessions) active(ctx context.Context, sess session) (bool, error) {
	if sess.ID == "" {
		return false, nil
	}
	now := s.o.Now()
	idHash := hashSessionID(sess.ID)
	p := sess.principal().ID()
	if c, ok := s.checks.get(idHash, now); ok {
		return c.active && c.principal == p, nil
	}
	row, err := s.o.Store.GetBrowserSession(ctx, idHash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		row = store.BrowserSession{}
	case err != nil:
		return false, err
	}
	c := check{principal: row.Principal, active: row.Principal != "" && row.Active(now), at: now}
	s.checks.put(idHash, c)
	return c.active && c.principal == p, nil
}

// Start deletes the sessions that have ended (expired, or signed out),
// once before it returns and then every SweepInterval, until Stop or ctx
// ends. Every replica may run it: the deletion is idempotent. A nil
// *Sessions has nothing to sweep.
func (s *Sessions) Start(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := errors.New("web: the sessions were already started")
	s.startOnce.Do(func() {
		err = nil
		ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
		s.done = make(chan struct{})
		s.sweep(ctx)
		go func() {
			defer close(s.done)
			t := time.NewTicker(s.o.SweepInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					s.sweep(ctx)
				}
			}
		}()
	})
	return err
}

// Stop ends the sweep Start started and waits for it. It is idempotent.
func (s *Sessions) Stop() {
	if s == nil {
		return
	}
	s.stopOnce.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
	})
}

// sweep deletes the sessions that have ended by now.
func (s *Sessions) sweep(ctx context.Context) {
	n, err := s.o.Store.DeleteBrowserSessions(ctx, s.o.Now())
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.LogAttrs(ctx, slog.LevelWarn, "web: deleting ended sessions failed", slog.String("error", err.Error()))
	case n > 0:
		s.log.LogAttrs(ctx, slog.LevelInfo, "web: deleted ended sessions", slog.Int("count", n))
	}
}

// errSignOutFailed is a sign-out the store did not record: the cookie is
// kept, so that the person can try again.
var errSignOutFailed = httpx.Errorf(http.StatusServiceUnavailable, "sign_out_failed",
	"Signing out could not be recorded just now, so your session still works. Try again in a moment.")

// revokeError logs why a sign-out could not be recorded and answers it.
func (s *Sessions) revokeError(w http.ResponseWriter, r *http.Request, err error) {
	s.log.LogAttrs(r.Context(), slog.LevelError, "web: recording a sign-out failed", slog.String("error", err.Error()))
	httpx.WriteError(w, r, nil, errSignOutFailed)
}
