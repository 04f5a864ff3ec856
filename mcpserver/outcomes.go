package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/workers"
	"github.com/usherhq/usher/store"
)

// maxPendingOutcomes bounds the outcome records being written at once.
const maxPendingOutcomes = 64

// Defaults of how records that follow a tool call are retried (see
// Options.RecordAttempts and Options.RecordBackoff).
const (
	defaultRecordAttempts = 8
	defaultRecordBackoff  = 50 * time.Millisecond
	// maxRecordBackoff caps the doubling wait between two attempts.
	maxRecordBackoff = 2 * time.Second
)

// outcomes writes the records of how tool calls ended (the execution's
// finish and its audit record) while their results go back to the callers.
// What must be durable before a tool runs (the decision, the execution's
// start) is written before it runs, on the caller's time; the outcome is not
// needed for the answer, so no caller waits for its write. On the
// stateless endpoint the write begins once the answer is on its way
// (afterResponse), so that it does not take the machine from the answer.
//
// A write is retried with backoff (see retry) until it is durable. One that
// still fails after every attempt makes the outcome unknown: the process
// says so at once to every retry of the call it answers (lost), and keeps
// trying to write the execution's outcome_unknown until it is durable or
// the Server drains. Should the process stop first, the execution stays
// started and a Sweeper reports it outcome_unknown, never run again.
//
// At most maxPendingOutcomes are written at once; beyond that a caller
// writes its own before it answers, so that callers slow down to what the
// database takes rather than pile up work in memory.
//
// A retry of a call whose outcome this process is still writing waits for
// it (await), so that it is answered from the finished execution rather
// than told the call is still running.
type outcomes struct {
	slots    chan struct{}
	warm     *workers.Pool // runs the writes that do not hold up their caller
	wg       sync.WaitGroup
	attempts int
	backoff  time.Duration
	hold     time.Duration // outcomeHold

	// stop ends the writes still retrying when Drain gives up.
	stop   context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	pending map[string]*pendingOutcome // idempotency key → its write
}

// pendingOutcome is the write of one call's outcome.
type pendingOutcome struct {
	done chan struct{} // closed once durable or given up on (lost)
	lost bool          // the outcome could not be recorded; set before done closes
}

func newOutcomes(attempts int, backoff time.Duration, warm *workers.Pool) *outcomes {
	stop, cancel := context.WithCancel(context.Background())
	return &outcomes{
		slots: make(chan struct{}, maxPendingOutcomes), warm: warm, attempts: attempts, backoff: backoff, hold: outcomeHold,
		stop: stop, cancel: cancel, pending: map[string]*pendingOutcome{},
	}
}

// write runs w, which records the outcome of the call of key (empty for a
// call without one), now in a goroutine of o.warm, or, when as many are being
// written as allowed, in the caller's. w's context does not end with
// parent's, only when Drain gives up. w reports through lost that the
// outcome could not be recorded; it may go on writing that it is unknown
// after calling lost, and returns once that is durable or ctx ends.
func (o *outcomes) write(parent context.Context, key string, w func(ctx context.Context, lost func())) {
	var p *pendingOutcome
	if key != "" {
		p = &pendingOutcome{done: make(chan struct{})}
		o.mu.Lock()
		o.pending[key] = p
		o.mu.Unlock()
	}
	var once sync.Once
	settle := func(lost bool) {
		if p == nil {
			return
		}
		once.Do(func() {
			o.mu.Lock()
			p.lost = lost
			o.mu.Unlock()
			close(p.done)
		})
	}
	run := func() {
		ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
		defer cancel()
		defer context.AfterFunc(o.stop, cancel)()
		w(ctx, func() { settle(true) })
		settle(false)
		if p != nil {
			o.mu.Lock()
			if o.pending[key] == p {
				delete(o.pending, key)
			}
			o.mu.Unlock()
		}
	}
	select {
	case o.slots <- struct{}{}:
		o.wg.Add(1)
		sent := responseSent(parent)
		o.warm.Go(func() {
			defer o.wg.Done()
			defer func() { <-o.slots }()
			o.afterResponse(sent)
			run()
		})
	default:
		run()
	}
}

// afterResponse returns once sent closes (the response to the call is on
// its way: see responseSent), within o.hold, or at once when Drain
// gives up or sent is nil. Until then the outcome's write, which the
// response does not wait for, would only take the machine from it.
func (o *outcomes) afterResponse(sent <-chan struct{}) {
	if sent == nil {
		return
	}
	select {
	case <-sent:
		return // no timer for a response already sent
	default:
	}
	t := time.NewTimer(o.hold)
	defer t.Stop()
	select {
	case <-sent:
	case <-t.C:
	case <-o.stop.Done():
	}
}

// outcomeHold bounds how long an outcome's write waits for its call's
// response to be sent: a client that reads its response slowly holds the
// response, not the record.
const outcomeHold = 100 * time.Millisecond

// await returns once the outcome of the call of key, if this process is
// writing one, is written or given up on, or when ctx ends.
func (o *outcomes) await(ctx context.Context, key string) {
	if key == "" {
		return
	}
	o.mu.Lock()
	p := o.pending[key]
	o.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.done:
	case <-ctx.Done():
	}
}

// lost reports whether this process could not record the outcome of the
// call of key and has not yet written that it is unknown: its execution
// still reads started, which is not the truth.
func (o *outcomes) lost(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.pending[key]
	return p != nil && p.lost
}

// retry calls f until it reports done, at most o.attempts times, waiting
// between attempts with a doubling backoff; it reports whether f did.
// forever retries until ctx ends, the wait capped at maxRecordBackoff.
func (o *outcomes) retry(ctx context.Context, forever bool, f func(attempt int) (done bool)) bool {
	wait := o.backoff
	for attempt := 0; forever || attempt < o.attempts; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
			wait = min(2*wait, maxRecordBackoff)
		}
		if f(attempt) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
	}
	return false
}

// wait returns once every write started has ended, or, when ctx ends
// first, stops the writes still retrying, waits for them to return and
// returns ctx's error.
func (o *outcomes) wait(ctx context.Context) error {
	err := waitGroup(ctx, &o.wg)
	if err != nil {
		o.cancel()
		o.wg.Wait()
	}
	return err
}

// errStartUnconfirmed: an execution's start failed in a way that may have
// committed, and reading it back failed too. The tool has not run.
var errStartUnconfirmed = errors.New("mcpserver: an execution's start could not be confirmed")

// begin starts the execution e with the record ev, as
// Executions.BeginExecution does. A failure of the write may still have
// committed it (a connection lost at the commit), so the execution is read
// back by its key before the caller is answered: started by this call (its
// StartedAt, to the stored microsecond, is this attempt's), the tool may
// run; absent, the start is written again, and when it is still absent
// after the last attempt the caller is told, truly, that nothing was run;
// another call's, it is answered as a retry. When that cannot be read
// either, the tool does not run (see unconfirmed).
func (s *Server) begin(ctx context.Context, e store.Execution, ev Event) (store.Execution, bool, error) {
	e.StartedAt = ev.At.UTC().Truncate(time.Microsecond)
	rec, started, err := s.opts.Executions.BeginExecution(ctx, e, ev)
	if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrInvalid) {
		return rec, started, err
	}
	s.log.WarnContext(ctx, "mcpserver: starting an execution failed; reading it back", "tool", e.Tool, "key", e.IdempotencyKey, "err", err)
	if s.readBack(ctx, e.IdempotencyKey, func(got store.Execution, found bool, attempt int) bool {
		switch {
		case !found && attempt == s.outcomes.attempts-1:
			// Known not started; the last attempt writes nothing that
			// would need reading back.
			return true
		case !found:
			rec, started, err = s.opts.Executions.BeginExecution(ctx, e, ev)
			return err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrInvalid)
		}
		rec, started, err = got, startedBy(got, e), nil
		return true
	}) {
		return rec, started, err
	}
	return store.Execution{}, false, s.unconfirmed(ctx, e, ev)
}

// consume uses the approval of the call b and starts its execution e (nil
// for a call without a key) with the record ev, as Approvals.Consume does.
// A failure other than ErrNotApproved may still have committed (see
// begin), so the execution is read back by its key: started by this call,
// the approval was used and the tool may run; absent, nothing was written,
// and the error is the caller's answer (the approval is still there for a
// retry); another call's, it is answered as a retry. When it cannot be
// read, the tool does not run (see unconfirmed).
func (s *Server) consume(ctx context.Context, b store.ApprovalBinding, e *store.Execution, ev Event) (store.Approval, store.Execution, bool, error) {
	if e != nil {
		e.StartedAt = ev.At.UTC().Truncate(time.Microsecond)
	}
	a, rec, started, err := s.opts.Approvals.Consume(ctx, b, e, ev)
	if err == nil || e == nil || errors.Is(err, ErrNotApproved) {
		return a, rec, started, err
	}
	s.log.WarnContext(ctx, "mcpserver: using an approval failed; reading its execution back", "tool", e.Tool, "key", e.IdempotencyKey, "err", err)
	mine := *e
	mine.ApprovalID = anyApproval
	var found bool
	if !s.readBack(ctx, e.IdempotencyKey, func(got store.Execution, ok bool, _ int) bool {
		rec, found = got, ok
		return true
	}) {
		return store.Approval{}, store.Execution{}, false, s.unconfirmed(ctx, mine, ev)
	}
	if !found {
		return store.Approval{}, store.Execution{}, false, err
	}
	return store.Approval{ID: rec.ApprovalID}, rec, startedBy(rec, mine), nil
}

// readBack reads the execution of key back after a write that failed, as
// often as the records are retried, until found, told what was read
// (found false for none), reports it done; false when it never was, or
// the execution could not be read.
func (s *Server) readBack(ctx context.Context, key string, found func(got store.Execution, found bool, attempt int) (done bool)) bool {
	return s.outcomes.retry(ctx, false, func(attempt int) bool {
		got, err := s.opts.Executions.GetExecution(ctx, key)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.WarnContext(ctx, "mcpserver: reading an execution back failed", "key", key, "err", err)
			return false
		}
		return found(got, err == nil, attempt)
	})
}

// unconfirmed returns errStartUnconfirmed for the start of e, which could
// be neither written nor read back: the tool does not run, and the
// execution is settled in the background: should the start turn out to be
// this call's, it is finished failed, with a result saying the tool was
// not run, so that the record never says more than what happened.
func (s *Server) unconfirmed(ctx context.Context, e store.Execution, ev Event) error {
	s.log.ErrorContext(ctx, "mcpserver: an execution's start could not be confirmed; the tool was not run", "tool", e.Tool, "key", e.IdempotencyKey)
	// Not awaited by a retry (no key): one meanwhile meets the database
	// as this call did.
	s.outcomes.write(ctx, "", func(ctx context.Context, _ func()) { s.settleUnconfirmed(ctx, e, ev) })
	return errStartUnconfirmed
}

// anyApproval stands, in the execution a call's approval use starts, for
// the approval's ID, which the caller learns only from the write: startedBy
// then takes any approval's start.
const anyApproval = "\x00any approval"

// startedBy reports whether the execution found under a key is the start e
// wrote.
func startedBy(found, e store.Execution) bool {
	approval := found.ApprovalID == e.ApprovalID || e.ApprovalID == anyApproval && found.ApprovalID != ""
	return found.Status == store.ExecutionStarted && found.Principal == e.Principal && found.Tool == e.Tool &&
		found.ArgumentsHash == e.ArgumentsHash && approval && found.RunID == e.RunID &&
		found.StartedAt.Equal(e.StartedAt)
}

// notRun is the result recorded for a call whose start was written but
// whose tool never ran (see begin).
const notRun = "This call was not run: the server could not confirm that its start was recorded, so it never called the tool. Make the call again to run it."

// settleUnconfirmed finishes e failed, with notRun, if its start, which
// could not be confirmed, was written after all; it retries until it knows.
func (s *Server) settleUnconfirmed(ctx context.Context, e store.Execution, ev Event) {
	result, _ := json.Marshal(errorResult(notRun)) // a text result always encodes
	s.outcomes.retry(ctx, true, func(int) bool {
		got, err := s.opts.Executions.GetExecution(ctx, e.IdempotencyKey)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return true
		case err != nil:
			return false
		case !startedBy(got, e):
			return true
		}
		ev = s.stamp(ev, KindExecutionFailed)
		ev.ApprovalID = got.ApprovalID
		ev.Outcome, ev.Reasons = OutcomeFailed, append(ev.Reasons, "not run: its start could not be confirmed")
		_, err = s.opts.Executions.FinishExecution(ctx, e.IdempotencyKey, store.ExecutionFailed, result, ev.At, ev)
		return err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)
	})
}

// newEventID returns a new Event.EventID: 128 random bits as 32 lowercase
// hex digits, the form the audit log takes.
func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// recordOutcome records how a call ended: with its execution's finish when
// it has an idempotency key, else on its own, retrying each until it is
// durable. Every attempt records ev with its EventID, so that an attempt
// that failed after its commit (the acknowledgement lost) is not recorded
// again by the next: the audit log answers that attempt with the record
// already there. A finish that cannot be written makes the outcome unknown: lost
// tells the retries this process answers, and the execution is then
// finished outcome_unknown as soon as the database takes it.
func (s *Server) recordOutcome(ctx context.Context, ev Event, status store.ExecutionStatus, result json.RawMessage, lost func()) {
	key := ev.IdempotencyKey
	if key == "" {
		if !s.outcomes.retry(ctx, false, func(int) bool {
			err := s.opts.Auditor.Record(ctx, ev)
			if err != nil {
				s.log.WarnContext(ctx, "mcpserver: writing the audit log failed", "kind", ev.Kind, "tool", ev.Tool, "err", err)
			}
			return err == nil
		}) {
			s.log.ErrorContext(ctx, "mcpserver: a call's outcome could not be recorded", "kind", ev.Kind, "tool", ev.Tool)
		}
		return
	}
	if s.finish(ctx, key, status, result, ev, false) {
		return
	}
	lost()
	s.log.ErrorContext(ctx, "mcpserver: a call's outcome could not be recorded; marking it outcome_unknown", "tool", ev.Tool, "key", key, "outcome", ev.Outcome)
	if status != store.ExecutionOutcomeUnknown {
		s.unknown.Inc()
		ev.Reasons = append(ev.Reasons, "the call ended "+string(status)+" but that could not be recorded")
		ev = s.stamp(ev, KindOutcomeUnknown)
		ev.Outcome = OutcomeUnknown
	}
	if !s.finish(ctx, key, store.ExecutionOutcomeUnknown, nil, ev, true) {
		s.log.ErrorContext(ctx, "mcpserver: marking an execution outcome_unknown failed; it stays started", "tool", ev.Tool, "key", key)
	}
}

// finish writes the end of the execution of key with ev, retried (forever:
// until ctx ends) until it is durable. An attempt that failed may have
// committed, so each retry first reads the execution back.
func (s *Server) finish(ctx context.Context, key string, status store.ExecutionStatus, result json.RawMessage, ev Event, forever bool) bool {
	return s.outcomes.retry(ctx, forever, func(attempt int) bool {
		if attempt > 0 || forever {
			// forever follows attempts that failed, as a retry does.
			rec, err := s.opts.Executions.GetExecution(ctx, key)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				s.log.WarnContext(ctx, "mcpserver: reading an execution back failed", "key", key, "err", err)
				return false
			}
			if err == nil && (rec.Status == status || status == store.ExecutionOutcomeUnknown && rec.Status != store.ExecutionStarted) {
				// A failed attempt committed; or, when only outcome_unknown
				// is left to write, the execution has ended after all.
				return true
			}
		}
		_, err := s.opts.Executions.FinishExecution(ctx, key, status, result, ev.At, ev)
		if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			// ev is recorded; the execution was already ended (marked
			// outcome_unknown by a Sweeper) if it was not ended now.
			return true
		}
		s.log.WarnContext(ctx, "mcpserver: finishing an execution failed", "tool", ev.Tool, "key", key, "attempt", attempt+1, "err", err)
		return false
	})
}

// CodeMissingClientCapability is protocol 2026-07-28's JSON-RPC error for
// a request that needs a capability its caller did not declare
// (MissingRequiredClientCapabilityError, SEP-2575). An upstream's is
// passed on to a caller of that protocol as it came, with its data (the
// capabilities required): it is the caller's to act on, not a failure of
// the tool.
const CodeMissingClientCapability = -32021

// A tools/call is answered with a result, except where protocol
// 2026-07-28 says a JSON-RPC error: a retry's refused requestState and an
// upstream's CodeMissingClientCapability. The enforcement point, which
// returns results, puts such an error in the request's rejection (see
// withRejection), and the handler answers with it instead of the result.
type rejectionKey struct{}

// withRejection returns ctx with a place for the JSON-RPC error that
// answers the request instead of its result.
func withRejection(ctx context.Context) (context.Context, *error) {
	var err error
	return context.WithValue(ctx, rejectionKey{}, &err), &err
}

// reject puts err in the request's rejection, if it has one, and returns
// the tool error result with err's message, which answers a request that
// has none (and is the result recorded for the call).
func reject(ctx context.Context, err *jsonrpc.Error) *mcp.CallToolResult {
	if slot, ok := ctx.Value(rejectionKey{}).(*error); ok {
		*slot = err
	}
	return errorResult(err.Message)
}

// missingCapability returns an upstream's CodeMissingClientCapability
// error, if err is one.
func missingCapability(err error) (*jsonrpc.Error, bool) {
	var je *jsonrpc.Error
	if errors.As(err, &je) && je.Code == CodeMissingClientCapability {
		return je, true
	}
	return nil, false
}

// isMissingCapability reports whether err is an upstream's
// CodeMissingClientCapability error.
func isMissingCapability(err error) bool {
	_, ok := missingCapability(err)
	return ok
}

// maxRefusalData bounds the data of an upstream's
// CodeMissingClientCapability error that is passed on.
const maxRefusalData = 4 << 10

// upstreamRefusal is the JSON-RPC error an upstream's refusal of a
// prompts/get, resources/read or completion/complete (or its
// CodeMissingClientCapability to a tools/call) is passed on as: its
// code and the start of its message, and for CodeMissingClientCapability
// its data too (the capabilities required, which 2026-07-28 makes part of
// the error), when it is short.
func upstreamRefusal(e *jsonrpc.Error) *jsonrpc.Error {
	out := &jsonrpc.Error{Code: e.Code, Message: truncate(e.Message, 256)}
	if e.Code == CodeMissingClientCapability && len(e.Data) <= maxRefusalData {
		out.Data = e.Data
	}
	return out
}
