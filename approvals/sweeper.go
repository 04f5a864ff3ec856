package approvals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/usherhq/usher/internal/periodic"
)

// ToolHashes returns the current definition hash of every tool, by name;
// the MCP server's catalog provides them.
type ToolHashes func(ctx context.Context) (map[string]string, error)

// SweeperOptions configures a Sweeper. A nil *SweeperOptions means every
// default.
type SweeperOptions struct {
	// Tools lists the tools' current definition hashes, for the
	// revocation of approvals granted for another definition. Default:
	// nil, no revocation (expiry only).
	Tools ToolHashes
	// Interval is the time between two sweeps. Default: 1 min.
	Interval time.Duration
	// Logger receives what was revoked or expired, and what failed.
	// Default: discard.
	Logger *slog.Logger
}

// Sweeper keeps the service's approvals current in the background: it
// revokes the open approvals of every tool whose definition changed (see
// Service.RevokeChanged) and expires overdue requests (Service.Expire). The
// clock is the service's (Options.Now). Every replica may run one: both are
// compare-and-swaps.
type Sweeper struct {
	svc   *Service
	tools ToolHashes
	log   *slog.Logger
	loop  *periodic.Loop
	seen  map[string]string // tool → definition hash at the last revocation; the loop's alone
}

// NewSweeper returns a Sweeper of svc, or one error naming every problem
// of opts.
func NewSweeper(svc *Service, opts *SweeperOptions) (*Sweeper, error) {
	var o SweeperOptions
	if opts != nil {
		o = *opts
	}
	var errs []error
	if svc == nil {
		errs = append(errs, errors.New("a service is required"))
	}
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("the interval is %v, want 0 (the default) or more", o.Interval))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("approvals: sweeper: %w", err)
	}
	if o.Interval == 0 {
		o.Interval = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sweeper{svc: svc, tools: o.Tools, log: o.Logger, seen: map[string]string{}}
	s.loop = periodic.New(o.Interval, func(ctx context.Context) { s.Sweep(ctx) })
	return s, nil
}

// Start sweeps at once and then every Interval, until Stop or until ctx
// ends. A Sweeper starts once.
func (s *Sweeper) Start(ctx context.Context) error { return s.loop.Start(ctx) }

// Stop ends the sweeps and waits for one under way. It is idempotent and
// safe to call without Start; call it before the store closes.
func (s *Sweeper) Stop() { s.loop.Stop() }

// Sweep revokes the approvals of tools changed since the last sweep (every
// tool on the first) and expires overdue requests, and returns how many of
// each. It must not run concurrently with itself or a started Sweeper.
func (s *Sweeper) Sweep(ctx context.Context) (revoked, expired int, err error) {
	var errs []error
	if s.tools != nil {
		revoked, err = s.revokeChanged(ctx)
		errs = append(errs, err)
	}
	expired, err = s.svc.Expire(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "approvals: the expiry sweep failed", "err", err)
		}
		errs = append(errs, err)
	} else if expired > 0 {
		s.log.InfoContext(ctx, "approvals: expired approval requests", "count", expired)
	}
	return revoked, expired, errors.Join(errs...)
}

// revokeChanged revokes the open approvals of every tool whose definition
// changed since the last sweep, so that nobody approves a call to a tool
// that is no longer what was requested. A tool whose revocation failed is
// tried again at the next sweep.
func (s *Sweeper) revokeChanged(ctx context.Context) (int, error) {
	hashes, err := s.tools(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "approvals: listing tools for the revocation sweep failed", "err", err)
		}
		// The tools that were listed are still checked.
	}
	total := 0
	var errs []error
	for tool, hash := range hashes {
		if s.seen[tool] == hash {
			continue
		}
		n, err := s.svc.RevokeChanged(ctx, tool, hash)
		total += n
		if err != nil {
			s.log.WarnContext(ctx, "approvals: revoking the approvals of a changed tool failed", "tool", tool, "err", err)
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			s.log.WarnContext(ctx, "approvals: a tool's definition changed: revoked its open approvals", "tool", tool, "hash", hash, "revoked", n)
		}
		s.seen[tool] = hash
	}
	return total, errors.Join(append(errs, err)...)
}
