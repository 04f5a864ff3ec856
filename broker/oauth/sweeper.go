package oauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/periodic"
)

// DefaultSweepInterval is the time between two sweeps of a Sweeper.
const DefaultSweepInterval = time.Hour

// SweeperOptions configures a Sweeper. A nil *SweeperOptions means every
// default.
type SweeperOptions struct {
	// Interval is the time between two sweeps. Default
	// DefaultSweepInterval.
	Interval time.Duration
	// Logger receives what was deleted and what failed. Default the
	// server's (ServerOptions.Logger).
	Logger *slog.Logger
}

// Sweeper deletes, in the background, the rows of the authorization
// server that can no longer be used:
//
//   - authorization codes and refresh tokens that ended — expired, their
//     family's end passed, revoked, or used (rotated) — once they have been
//     ended for the retention (Retention), the server's refresh idle lifetime
//     (ServerOptions.RefreshIdle): a used token is what reuse detection
//     recognises (a copy presented again revokes its family), and a code
//     what replay detection does, so each is kept for as long as the token
//     it was, had it not been used, could still have been presented — at
//     most the idle lifetime after its issue, which is before its use;
//     deleted, a copy is merely unknown (invalid_grant) and revokes
//     nothing;
//   - the answers of consent forms, once the form could no longer be
//     posted anyway, and the retention after;
//   - revoked grants, the retention after their revocation;
//   - client assertions' jti (private_key_jwt) expired for longer than
//     AssertionLeeway, the clock skew allowed between replicas: an expired
//     assertion is refused by its exp before its jti is looked at, and each
//     client's are otherwise deleted only at its next assertion, so that
//     the jti of clients gone quiet (any metadata document can be one)
//     would stay.
//
// The clock is the server's (ServerOptions.Now). Every replica may run
// one: the deletions are idempotent, and a sweep that loses a deadlock to
// another replica's is retried by the store.
type Sweeper struct {
	srv  *Server
	log  *slog.Logger
	loop *periodic.Loop
}

// NewSweeper returns a Sweeper of srv's rows, or one error naming every
// problem of opts.
func NewSweeper(srv *Server, opts *SweeperOptions) (*Sweeper, error) {
	var o SweeperOptions
	if opts != nil {
		o = *opts
	}
	var errs []error
	if srv == nil {
		errs = append(errs, errors.New("a server is required"))
	}
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("the interval is %v, want 0 (the default) or more", o.Interval))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("oauth: sweeper: %w", err)
	}
	if o.Interval == 0 {
		o.Interval = DefaultSweepInterval
	}
	if o.Logger == nil {
		o.Logger = srv.log
	}
	s := &Sweeper{srv: srv, log: o.Logger}
	s.loop = periodic.New(o.Interval, func(ctx context.Context) { _, _ = s.Sweep(ctx) })
	return s, nil
}

// Start sweeps at once and then every Interval, until Stop or until ctx
// ends. A Sweeper starts once.
func (s *Sweeper) Start(ctx context.Context) error { return s.loop.Start(ctx) }

// Stop ends the sweeps and waits for one under way. It is idempotent and
// safe to call without Start; call it before the store closes.
func (s *Sweeper) Stop() { s.loop.Stop() }

// Retention is how long an ended code or refresh token, or a revoked
// grant, is kept: the server's refresh idle lifetime, and at least the
// longest an access token of a revoked grant could still be unexpired
// (broker.MaxTokenLifetime and the verifier's leeway), so that its
// revocation is not forgotten while the token could be presented.
func (s *Sweeper) Retention() time.Duration {
	return max(s.srv.refreshIdle, broker.MaxTokenLifetime+broker.MaxLeeway)
}

// Sweep deletes the client assertions expired for longer than
// AssertionLeeway, then the codes and refresh tokens ended for longer than
// the retention, and returns how many rows it deleted; and it clears the
// salts of the refresh tokens whose repeats have ended
// (ServerOptions.RefreshReuseInterval), which a successor's use or
// revocation has not cleared before. A failed deletion does not keep the
// others from running; the next sweep tries again.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	now := s.srv.clock()
	assertions, err1 := s.srv.st.DeleteExpiredClientAssertions(ctx, now.Add(-AssertionLeeway))
	ended, err2 := s.srv.st.DeleteExpiredOAuth(ctx, now.Add(-s.Retention()))
	_, err3 := s.srv.st.EndRefreshRepeats(ctx, now)
	err := errors.Join(err1, err2, err3)
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "oauth: the sweep of ended codes, refresh tokens and client assertions failed", "err", err)
	}
	if n := ended + assertions; n > 0 {
		s.log.InfoContext(ctx, "oauth: deleted ended codes, refresh tokens and client assertions", "count", n, "retention", s.Retention())
	}
	return ended + assertions, err
}
