package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/internal/periodic"
	"github.com/usherhq/usher/store"
)

// sweepMargin is how much longer than a call can run an execution still
// started is left before it is taken for one whose process stopped: a
// live process records its outcome, or that it is unknown, within seconds
// of the call's end (see Options.RecordAttempts).
const sweepMargin = time.Minute

// DefaultAbandonedAfter is how long after its start an execution still
// started is taken for one whose process stopped, when the calls run for
// at most DefaultCallTimeout: that and a minute.
const DefaultAbandonedAfter = DefaultCallTimeout + sweepMargin

// DefaultInputAbandonedAfter is how long after its latest round started
// an execution still awaiting input is taken for one its caller gave up
// on, with the default CallTimeout and InputLifetime: the round runs for
// at most the CallTimeout, and the request state it gave the caller
// expires InputLifetime after it ended, after which no retry can resume
// it; a minute more.
const DefaultInputAbandonedAfter = DefaultAbandonedAfter + DefaultInputLifetime

// inputAbandonedText is the result a call that no answer came for is
// ended with, which a retry under its idempotency key gets.
const inputAbandonedText = "This call asked for input and no answer came before the request for it expired, " +
	"so it did not complete. Call the tool again to run it anew."

// AbandonedExecutions finds the executions whose process stopped mid-call
// and those whose caller never answered their input requests; cmd/usher
// implements it with the store and the audit log.
type AbandonedExecutions interface {
	// MarkAbandoned marks every execution still started before olderThan
	// as outcome_unknown, records event(e) of each marked e, and returns
	// them, in one transaction: after an error none is marked or
	// recorded. An execution that ended meanwhile is neither.
	MarkAbandoned(ctx context.Context, olderThan time.Time, event func(e store.Execution) Event) ([]store.Execution, error)
	// EndAwaitingInput ends every execution still awaiting input whose
	// latest round started before olderThan as failed, with result,
	// finished at now, records event(e) of each ended e, and returns
	// them, in one transaction: after an error none is ended or recorded.
	// An execution started again meanwhile is neither.
	EndAwaitingInput(ctx context.Context, olderThan, now time.Time, result json.RawMessage, event func(e store.Execution) Event) ([]store.Execution, error)
}

// SweeperOptions configures a Sweeper. Fields marked required have no
// default; every other zero value selects its default.
type SweeperOptions struct {
	// Executions marks abandoned executions and records an
	// outcome_unknown event for each. Required.
	Executions AbandonedExecutions
	// CallTimeout is the longest a call of the swept executions runs: the
	// catalog's (Catalog.CallTimeout). Default DefaultCallTimeout.
	CallTimeout time.Duration
	// InputLifetime is how long a caller has to answer a round's input
	// requests: the server's (Server.InputLifetime). Default
	// DefaultInputLifetime.
	InputLifetime time.Duration
	// AbandonedAfter is how long after its start an execution still
	// started is marked outcome_unknown. It must exceed CallTimeout, so
	// that no call still running is marked. Default CallTimeout and a
	// minute (DefaultAbandonedAfter with the default CallTimeout).
	AbandonedAfter time.Duration
	// InputAbandonedAfter is how long after its latest round started an
	// execution still awaiting input is ended, failed. It must exceed
	// CallTimeout and InputLifetime together, so that no request state
	// that could resume it is still valid. Default CallTimeout,
	// InputLifetime and a minute (DefaultInputAbandonedAfter with the
	// defaults).
	InputAbandonedAfter time.Duration
	// Interval is the time between two sweeps. Default 1 min.
	Interval time.Duration
	// Logger receives what was marked and what failed. Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Registerer receives, when not nil, the count of the executions the
	// sweeps marked outcome_unknown (usher_mcp_outcome_unknown_total,
	// source "sweep").
	Registerer prometheus.Registerer
}

// Sweeper marks the executions of tool calls whose process stopped before
// recording how they ended (a crash, a kill) as outcome_unknown, and
// audits each, with one write: they are reported, never run again. A live
// process records its own outcomes; this is the backstop for dead ones.
// Every replica may run one: the mark is a compare-and-swap.
type Sweeper struct {
	opts    SweeperOptions
	loop    *periodic.Loop
	unknown prometheus.Counter
}

// NewSweeper returns a Sweeper, or one error naming every problem of opts.
func NewSweeper(opts *SweeperOptions) (*Sweeper, error) {
	var o SweeperOptions
	if opts != nil {
		o = *opts
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.InputLifetime == 0 {
		o.InputLifetime = DefaultInputLifetime
	}
	if o.AbandonedAfter == 0 {
		o.AbandonedAfter = o.CallTimeout + sweepMargin
	}
	if o.InputAbandonedAfter == 0 {
		o.InputAbandonedAfter = o.CallTimeout + o.InputLifetime + sweepMargin
	}
	if o.Interval == 0 {
		o.Interval = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var errs []error
	if o.Executions == nil {
		errs = append(errs, errors.New("Executions are required"))
	}
	if o.CallTimeout < 0 || o.InputLifetime < 0 || o.Interval < 0 {
		errs = append(errs, fmt.Errorf("CallTimeout, InputLifetime and Interval must not be negative, got %s, %s and %s",
			o.CallTimeout, o.InputLifetime, o.Interval))
	} else {
		// A shorter wait would end calls that are still running, or that
		// their callers can still resume.
		if o.AbandonedAfter <= o.CallTimeout {
			errs = append(errs, fmt.Errorf("AbandonedAfter (%s) must exceed CallTimeout (%s)", o.AbandonedAfter, o.CallTimeout))
		}
		if o.InputAbandonedAfter <= o.CallTimeout+o.InputLifetime {
			errs = append(errs, fmt.Errorf("InputAbandonedAfter (%s) must exceed CallTimeout and InputLifetime together (%s)",
				o.InputAbandonedAfter, o.CallTimeout+o.InputLifetime))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("mcpserver: sweeper options: %w", err)
	}
	unknown, err := newOutcomeUnknown(o.Registerer, unknownSweep)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: sweeper: metrics: %w", err)
	}
	s := &Sweeper{opts: o, unknown: unknown}
	s.loop = periodic.New(o.Interval, func(ctx context.Context) { s.Sweep(ctx) })
	return s, nil
}

// Start sweeps at once and then every Interval, until Stop or until ctx
// ends. A Sweeper starts once.
func (s *Sweeper) Start(ctx context.Context) error { return s.loop.Start(ctx) }

// Stop ends the sweeps and waits for one under way. It is idempotent and
// safe to call without Start; call it before the store closes.
func (s *Sweeper) Stop() { s.loop.Stop() }

// Sweep marks the executions started more than AbandonedAfter ago and
// still started as outcome_unknown, and ends those whose latest round
// started more than InputAbandonedAfter ago and still awaiting input as
// failed, each audited in the same transaction as its change, and returns
// the executions it changed, those marked first.
func (s *Sweeper) Sweep(ctx context.Context) ([]store.Execution, error) {
	now := s.opts.Now()
	lost, err := s.opts.Executions.MarkAbandoned(ctx, now.Add(-s.opts.AbandonedAfter), func(e store.Execution) Event {
		return sweptEvent(e, now, KindOutcomeUnknown, OutcomeUnknown, "its process stopped before recording how it ended")
	})
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Logger.WarnContext(ctx, "mcpserver: the abandoned execution sweep failed", "err", err)
		}
		return nil, err
	}
	s.unknown.Add(float64(len(lost)))
	for _, e := range lost {
		s.opts.Logger.WarnContext(ctx, "mcpserver: a tool execution's outcome is unknown: its process stopped", "tool", e.Tool, "key", e.IdempotencyKey)
	}
	ended, err := s.opts.Executions.EndAwaitingInput(ctx, now.Add(-s.opts.InputAbandonedAfter), now, inputAbandonedResult, func(e store.Execution) Event {
		return sweptEvent(e, now, KindInputAbandoned, OutcomeFailed, "its caller did not answer its input requests before they expired")
	})
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Logger.WarnContext(ctx, "mcpserver: the sweep of calls awaiting input failed", "err", err)
		}
		return lost, err
	}
	for _, e := range ended {
		s.opts.Logger.InfoContext(ctx, "mcpserver: a tool call awaiting input was ended: no answer came", "tool", e.Tool, "key", e.IdempotencyKey)
	}
	return append(lost, ended...), nil
}

// inputAbandonedResult is inputAbandonedText as the CallToolResult stored.
var inputAbandonedResult = func() json.RawMessage {
	b, err := json.Marshal(errorResult(inputAbandonedText))
	if err != nil {
		panic(err) // a constant result
	}
	return b
}()

// sweptEvent is the audit event of a sweep's change of e.
func sweptEvent(e store.Execution, now time.Time, kind, outcome, reason string) Event {
	return Event{
		Kind: kind, At: now, Principal: e.Principal, Tool: e.Tool, ArgumentsHash: e.ArgumentsHash,
		ApprovalID: e.ApprovalID, RunID: e.RunID, IdempotencyKey: e.IdempotencyKey, Outcome: outcome,
		Reasons: []string{reason},
	}
}
