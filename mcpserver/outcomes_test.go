package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/workers"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// errInjected is the failure faultyExecutions injects.
var errInjected = errors.New("injected fault: the connection to the database was lost")

// fault is how one call of faultyExecutions fails.
type fault int

const (
	noFault fault = iota
	// failBefore fails the call without writing anything.
	failBefore
	// failAfter writes, then fails: a commit whose answer was lost.
	failAfter
)

// faultyExecutions are the env's executions (a real store and the audit
// log) whose calls fail on cue: rule decides each call from its method
// ("begin", "get", "finish"), its count for that method (from 1) and, for a
// finish, the status it writes.
type faultyExecutions struct {
	Executions

	mu    sync.Mutex
	calls map[string]int
	rule  func(method string, n int, status store.ExecutionStatus) fault
}

// faulty installs a faultyExecutions with rule in front of the server's
// executions.
func faulty(f **faultyExecutions, rule func(method string, n int, status store.ExecutionStatus) fault) func(*Options) {
	return func(o *Options) {
		*f = &faultyExecutions{Executions: o.Executions, calls: map[string]int{}, rule: rule}
		o.Executions = *f
	}
}

func (f *faultyExecutions) fault(method string, status store.ExecutionStatus) fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	if f.rule == nil {
		return noFault
	}
	return f.rule(method, f.calls[method], status)
}

// setRule replaces the rule; nil injects nothing more.
func (f *faultyExecutions) setRule(rule func(method string, n int, status store.ExecutionStatus) fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rule = rule
}

// count returns how often method was called.
func (f *faultyExecutions) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *faultyExecutions) GetExecution(ctx context.Context, key string) (store.Execution, error) {
	if f.fault("get", "") != noFault {
		return store.Execution{}, errInjected
	}
	return f.Executions.GetExecution(ctx, key)
}

func (f *faultyExecutions) BeginExecution(ctx context.Context, e store.Execution, ev Event) (store.Execution, bool, error) {
	switch f.fault("begin", "") {
	case failBefore:
		return store.Execution{}, false, errInjected
	case failAfter:
		if _, _, err := f.Executions.BeginExecution(ctx, e, ev); err != nil {
			return store.Execution{}, false, err
		}
		return store.Execution{}, false, errInjected
	}
	return f.Executions.BeginExecution(ctx, e, ev)
}

func (f *faultyExecutions) FinishExecution(ctx context.Context, key string, status store.ExecutionStatus, result json.RawMessage, now time.Time, ev Event) (store.Execution, error) {
	switch f.fault("finish", status) {
	case failBefore:
		return store.Execution{}, errInjected
	case failAfter:
		if _, err := f.Executions.FinishExecution(ctx, key, status, result, now, ev); err != nil {
			return store.Execution{}, err
		}
		return store.Execution{}, errInjected
	}
	return f.Executions.FinishExecution(ctx, key, status, result, now, ev)
}

// engines are the stores the outcome tests run on.
var engines = []struct {
	name string
	open func(testing.TB) store.Store
}{
	{"SQLite", storetest.NewSQLite},
	{"PostgreSQL", storetest.NewPostgres},
}

// fastRetries retries records quickly, so that giving up takes
// milliseconds.
func fastRetries(o *Options) {
	o.RecordAttempts, o.RecordBackoff = 3, time.Millisecond
}

// outcomeEnv is an env with the fixture's echo allowed and the faults of
// rule in front of its executions.
type outcomeEnv struct {
	*env
	up     *fixture
	faults *faultyExecutions
	cs     *mcp.ClientSession
}

func newOutcomeEnv(t *testing.T, st store.Store, rule func(string, int, store.ExecutionStatus) fault, opts ...func(*Options)) *outcomeEnv {
	t.Helper()
	oe := &outcomeEnv{up: newFixture(t)}
	install := faulty(&oe.faults, rule)
	oe.env = newEnv(t, envConfig{
		rules:     map[string]Decision{"fx__echo": Allow},
		upstreams: []Upstream{{Name: "fx", URL: oe.up.url}},
		store:     st,
		server: func(o *Options) {
			for _, f := range opts {
				f(o)
			}
			install(o)
		},
	})
	oe.cs = oe.connect(alice, "", nil, "")
	return oe
}

// echo calls fx__echo with the key k-1.
func (oe *outcomeEnv) echo(t *testing.T) *mcp.CallToolResult {
	t.Helper()
	return call(t, oe.cs, "fx__echo", map[string]any{"text": "once"}, mcp.Meta{MetaIdempotencyKey: "k-1"})
}

// drain waits for the outcome writes, failing the test if they do not end.
func (oe *outcomeEnv) drain(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := oe.server.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// execution reads the execution of the calls echo makes.
func (oe *outcomeEnv) execution(t *testing.T) store.Execution {
	t.Helper()
	keys := oe.audit.keys()
	if len(keys) == 0 {
		t.Fatal("no audit record names an idempotency key")
	}
	rec, err := oe.store.GetExecution(t.Context(), keys[0])
	if err != nil {
		t.Fatalf("GetExecution: %v", err)
	}
	return rec
}

// keys returns the idempotency keys the audit records name, in order.
func (a *auditLog) keys() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, e := range a.events {
		if e.IdempotencyKey != "" {
			out = append(out, e.IdempotencyKey)
		}
	}
	return out
}

// wantEcho fails the test unless res is the echo's own result.
func wantEcho(t *testing.T, what string, res *mcp.CallToolResult) {
	t.Helper()
	if res.IsError || text(res) != "echo: once" {
		t.Errorf("%s = %q (error %v), want the tool's result", what, text(res), res.IsError)
	}
}

// TestFinishRetriedUntilDurable checks that a finish that fails is written
// again until it is durable: the execution ends succeeded with its result,
// recorded once, and a retry is answered from it.
func TestFinishRetriedUntilDurable(t *testing.T) {
	t.Parallel()
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			oe := newOutcomeEnv(t, eng.open(t), func(method string, n int, _ store.ExecutionStatus) fault {
				if method == "finish" && n <= 2 {
					return failBefore
				}
				return noFault
			}, fastRetries)
			wantEcho(t, "the call", oe.echo(t))
			oe.drain(t)
			if n := oe.faults.count("finish"); n != 3 {
				t.Errorf("the finish was tried %d times, want 3 (two failures, then durable)", n)
			}
			rec := oe.execution(t)
			if rec.Status != store.ExecutionSucceeded || !strings.Contains(string(rec.Result), "echo: once") {
				t.Errorf("execution = %s %s, want succeeded with the result", rec.Status, rec.Result)
			}
			wantEcho(t, "the retry", oe.echo(t))
			if n := oe.up.called("echo"); n != 1 {
				t.Errorf("ran %d times, want 1", n)
			}
			want := []string{KindDecision, KindExecuted, KindDecision, KindReplayed}
			if got := oe.auditKinds("fx__echo"); !reflect.DeepEqual(got, want) {
				t.Errorf("audit = %v, want %v", got, want)
			}
		})
	}
}

// TestFinishThatCommittedIsNotWrittenAgain checks that a finish whose
// commit succeeded but answered an error is read back, not written (and
// audited) a second time.
func TestFinishThatCommittedIsNotWrittenAgain(t *testing.T) {
	t.Parallel()
	oe := newOutcomeEnv(t, nil, func(method string, n int, _ store.ExecutionStatus) fault {
		if method == "finish" && n == 1 {
			return failAfter
		}
		return noFault
	}, fastRetries)
	wantEcho(t, "the call", oe.echo(t))
	oe.drain(t)
	if rec := oe.execution(t); rec.Status != store.ExecutionSucceeded {
		t.Errorf("execution = %s, want succeeded", rec.Status)
	}
	if n := oe.faults.count("finish"); n != 1 {
		t.Errorf("the finish was written %d times, want 1 (the retry reads it back)", n)
	}
	if got, want := oe.auditKinds("fx__echo"), []string{KindDecision, KindExecuted}; !reflect.DeepEqual(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}
}

// TestOutcomeUnknownWithinSeconds checks that, with the default retries, a
// finish that cannot be written makes the execution outcome_unknown within
// seconds (not at the next sweep), audited so, and that a retry is told the
// outcome is unknown and does not run the tool again.
func TestOutcomeUnknownWithinSeconds(t *testing.T) {
	t.Parallel()
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			oe := newOutcomeEnv(t, eng.open(t), func(method string, _ int, status store.ExecutionStatus) fault {
				if method == "finish" && status == store.ExecutionSucceeded {
					return failBefore
				}
				return noFault
			})
			wantEcho(t, "the call", oe.echo(t))
			answered := time.Now()
			oe.drain(t)
			took := time.Since(answered)
			if rec := oe.execution(t); rec.Status != store.ExecutionOutcomeUnknown {
				t.Fatalf("execution = %s, want outcome_unknown", rec.Status)
			}
			if n := oe.faults.count("finish"); n != defaultRecordAttempts+1 {
				t.Errorf("finishes = %d, want %d attempts and the outcome_unknown", n, defaultRecordAttempts)
			}
			// Loosely: the attempts' backoff adds up to about 5 s.
			if took > 30*time.Second {
				t.Errorf("outcome_unknown was durable %s after the answer, want seconds", took)
			}
			res := oe.echo(t)
			if !res.IsError || !strings.Contains(text(res), "without a recorded outcome") {
				t.Errorf("the retry = %q, want the outcome reported unknown", text(res))
			}
			if n := oe.up.called("echo"); n != 1 {
				t.Errorf("ran %d times, want 1", n)
			}
			want := []string{KindDecision, KindOutcomeUnknown, KindDecision, KindReplayed}
			if got := oe.auditKinds("fx__echo"); !reflect.DeepEqual(got, want) {
				t.Errorf("audit = %v, want %v", got, want)
			}
			t.Logf("outcome_unknown durable %s after the answer", took.Round(time.Millisecond))
		})
	}
}

// TestRetryWhileOutcomeCannotBeRecorded checks that while the database
// takes no write at all, a retry is told the truth (the call ran, its
// outcome could not be recorded) although the record still says started,
// and that outcome_unknown is written once the database is back.
func TestRetryWhileOutcomeCannotBeRecorded(t *testing.T) {
	t.Parallel()
	down := func(method string, _ int, _ store.ExecutionStatus) fault {
		if method == "finish" {
			return failBefore
		}
		return noFault
	}
	oe := newOutcomeEnv(t, nil, down, fastRetries)
	wantEcho(t, "the call", oe.echo(t))
	// The retry waits for the finish to be given up on.
	res := oe.echo(t)
	if !res.IsError || text(res) != unrecordedOutcome {
		t.Errorf("the retry while the outcome cannot be recorded = %q, want %q", text(res), unrecordedOutcome)
	}
	if rec := oe.execution(t); rec.Status != store.ExecutionStarted {
		t.Errorf("execution = %s while nothing can be written, want still started", rec.Status)
	}
	oe.faults.setRule(nil)
	oe.drain(t)
	if rec := oe.execution(t); rec.Status != store.ExecutionOutcomeUnknown {
		t.Errorf("execution = %s once the database is back, want outcome_unknown", rec.Status)
	}
	if res := oe.echo(t); !strings.Contains(text(res), "without a recorded outcome") {
		t.Errorf("the retry afterwards = %q, want the outcome reported unknown", text(res))
	}
	if n := oe.up.called("echo"); n != 1 {
		t.Errorf("ran %d times, want 1", n)
	}
}

// TestDrainStopsRetries checks that Drain, when its context ends, stops
// the writes still being retried and joins them: the execution stays
// started, for a Sweeper to report.
func TestDrainStopsRetries(t *testing.T) {
	t.Parallel()
	oe := newOutcomeEnv(t, nil, func(method string, _ int, _ store.ExecutionStatus) fault {
		if method == "finish" {
			return failBefore
		}
		return noFault
	}, fastRetries)
	wantEcho(t, "the call", oe.echo(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := oe.server.Drain(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Drain with a cancelled context while a finish is retried = %v, want context.Canceled", err)
	}
	if rec := oe.execution(t); rec.Status != store.ExecutionStarted {
		t.Errorf("execution = %s, want started", rec.Status)
	}
	// Every write has returned: a second Drain has nothing to wait for.
	if err := oe.server.Drain(t.Context()); err != nil {
		t.Errorf("Drain again = %v", err)
	}
}

// TestStartThatCommittedRuns checks that a start whose commit succeeded
// but answered an error is read back: the call is this one's, so the tool
// runs and the caller gets its result, never "nothing was run".
func TestStartThatCommittedRuns(t *testing.T) {
	t.Parallel()
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			oe := newOutcomeEnv(t, eng.open(t), func(method string, n int, _ store.ExecutionStatus) fault {
				if method == "begin" && n == 1 {
					return failAfter
				}
				return noFault
			}, fastRetries)
			wantEcho(t, "the call", oe.echo(t))
			oe.drain(t)
			if n := oe.up.called("echo"); n != 1 {
				t.Errorf("ran %d times, want 1", n)
			}
			if n := oe.faults.count("begin"); n != 1 {
				t.Errorf("the start was written %d times, want 1", n)
			}
			if rec := oe.execution(t); rec.Status != store.ExecutionSucceeded {
				t.Errorf("execution = %s, want succeeded", rec.Status)
			}
		})
	}
}

// TestStartThatFailedIsWrittenAgain checks that a start that failed
// without committing is found absent and written again, and the tool runs.
func TestStartThatFailedIsWrittenAgain(t *testing.T) {
	t.Parallel()
	oe := newOutcomeEnv(t, nil, func(method string, n int, _ store.ExecutionStatus) fault {
		if method == "begin" && n == 1 {
			return failBefore
		}
		return noFault
	}, fastRetries)
	wantEcho(t, "the call", oe.echo(t))
	oe.drain(t)
	if n := oe.faults.count("begin"); n != 2 {
		t.Errorf("the start was tried %d times, want 2", n)
	}
	if rec := oe.execution(t); rec.Status != store.ExecutionSucceeded || oe.up.called("echo") != 1 {
		t.Errorf("execution = %s after %d runs, want succeeded after 1", rec.Status, oe.up.called("echo"))
	}
}

// TestStartUnconfirmed checks that a start that may have committed and
// cannot be read back is answered truthfully (not run, unconfirmed), that
// the tool does not run, and that the record, once readable, says so too.
func TestStartUnconfirmed(t *testing.T) {
	t.Parallel()
	oe := newOutcomeEnv(t, nil, func(method string, n int, _ store.ExecutionStatus) fault {
		switch {
		case method == "begin" && n == 1:
			return failAfter
		case method == "get":
			return failBefore
		}
		return noFault
	}, fastRetries)
	res := oe.echo(t)
	if !res.IsError || !strings.Contains(text(res), "was not run") || !strings.Contains(text(res), "could not be confirmed") {
		t.Errorf("the call = %q, want it reported not run and its start unconfirmed", text(res))
	}
	if n := oe.up.called("echo"); n != 0 {
		t.Fatalf("ran %d times, want 0", n)
	}
	oe.faults.setRule(nil)
	oe.drain(t)
	rec := oe.execution(t)
	if rec.Status != store.ExecutionFailed || !strings.Contains(string(rec.Result), "was not run") {
		t.Errorf("execution = %s %s, want failed, not run", rec.Status, rec.Result)
	}
	if res := oe.echo(t); !res.IsError || text(res) != notRun {
		t.Errorf("the retry = %q, want %q", text(res), notRun)
	}
	if n := oe.up.called("echo"); n != 0 {
		t.Errorf("ran %d times, want 0", n)
	}
}

// TestOutcomesSurviveTerminatedConnections terminates the PostgreSQL
// backends of a database of the test's own, for real, once before the
// execution's start and once before its finish: the start is reconciled
// and the tool runs once, and the finish is written again until durable.
func TestOutcomesSurviveTerminatedConnections(t *testing.T) {
	t.Parallel()
	st, terminate := storetest.NewPostgresDatabase(t)
	for _, at := range []string{"begin", "finish"} {
		t.Run(at, func(t *testing.T) {
			k := &killingExecutions{at: at, terminate: terminate}
			oe := newOutcomeEnv(t, st, nil, func(o *Options) {
				k.Executions = o.Executions
				o.Executions = k
			})
			res := call(t, oe.cs, "fx__echo", map[string]any{"text": "once"}, mcp.Meta{MetaIdempotencyKey: "kill-" + at})
			wantEcho(t, "the call", res)
			oe.drain(t)
			if k.firstErr() == nil {
				t.Fatalf("the %s on terminated connections did not fail: the fault was not injected", at)
			}
			if n := oe.up.called("echo"); n != 1 {
				t.Errorf("ran %d times, want 1", n)
			}
			if rec := oe.execution(t); rec.Status != store.ExecutionSucceeded || !strings.Contains(string(rec.Result), "echo: once") {
				t.Errorf("execution = %s %s, want succeeded with the result", rec.Status, rec.Result)
			}
			if got, want := oe.auditKinds("fx__echo"), []string{KindDecision, KindExecuted}; !reflect.DeepEqual(got, want) {
				t.Errorf("audit = %v, want %v", got, want)
			}
			wantEcho(t, "the retry", call(t, oe.cs, "fx__echo", map[string]any{"text": "once"}, mcp.Meta{MetaIdempotencyKey: "kill-" + at}))
			if n := oe.up.called("echo"); n != 1 {
				t.Errorf("ran %d times after the retry, want 1", n)
			}
		})
	}
}

// killingExecutions terminates the database's backends before the first
// call of method at, and keeps what that call returned.
type killingExecutions struct {
	Executions
	at        string
	terminate func()

	mu    sync.Mutex
	calls int
	err   error
}

func (k *killingExecutions) first(method string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if method != k.at {
		return false
	}
	k.calls++
	if k.calls == 1 {
		k.terminate()
		return true
	}
	return false
}

func (k *killingExecutions) keep(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.err = err
}

func (k *killingExecutions) firstErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

func (k *killingExecutions) BeginExecution(ctx context.Context, e store.Execution, ev Event) (store.Execution, bool, error) {
	first := k.first("begin")
	rec, started, err := k.Executions.BeginExecution(ctx, e, ev)
	if first {
		k.keep(err)
	}
	return rec, started, err
}

func (k *killingExecutions) FinishExecution(ctx context.Context, key string, status store.ExecutionStatus, result json.RawMessage, now time.Time, ev Event) (store.Execution, error) {
	first := k.first("finish")
	rec, err := k.Executions.FinishExecution(ctx, key, status, result, now, ev)
	if first {
		k.keep(err)
	}
	return rec, err
}

// TestStartThatNeverCommitsRunsNothing checks that a start that keeps
// failing, while the store can be read, is answered with the truth: it was
// read back absent, so nothing was run.
func TestStartThatNeverCommitsRunsNothing(t *testing.T) {
	t.Parallel()
	oe := newOutcomeEnv(t, nil, func(method string, _ int, _ store.ExecutionStatus) fault {
		if method == "begin" {
			return failBefore
		}
		return noFault
	}, fastRetries)
	res := oe.echo(t)
	if !res.IsError || !strings.Contains(text(res), "nothing was run") {
		t.Errorf("the call = %q, want nothing run", text(res))
	}
	oe.drain(t)
	// The first start, then one more per attempt but the last, which
	// only reads.
	if n := oe.faults.count("begin"); n != 3 {
		t.Errorf("the start was tried %d times, want 3", n)
	}
	if n := oe.up.called("echo"); n != 0 {
		t.Errorf("ran %d times, want 0", n)
	}
	if keys := oe.audit.keys(); len(keys) != 0 {
		t.Errorf("the audit names %v, want no execution", keys)
	}
}

// TestLastFinishThatCommittedIsNotMarkedUnknown checks that when the last
// attempt of a finish committed but answered an error, the execution is
// read back ended and is neither marked nor audited outcome_unknown.
func TestLastFinishThatCommittedIsNotMarkedUnknown(t *testing.T) {
	t.Parallel()
	oe := newOutcomeEnv(t, nil, func(method string, n int, status store.ExecutionStatus) fault {
		switch {
		case method != "finish" || status != store.ExecutionSucceeded:
			return noFault
		case n < 3: // fastRetries' attempts
			return failBefore
		}
		return failAfter
	}, fastRetries)
	wantEcho(t, "the call", oe.echo(t))
	oe.drain(t)
	if rec := oe.execution(t); rec.Status != store.ExecutionSucceeded {
		t.Errorf("execution = %s, want succeeded", rec.Status)
	}
	if got, want := oe.auditKinds("fx__echo"), []string{KindDecision, KindExecuted}; !reflect.DeepEqual(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}
	wantEcho(t, "the retry", oe.echo(t))
}

// TestOutcomeRetryKeepsEventID checks that the record of how a call
// without a key ended, written again after an attempt whose commit was
// not acknowledged, is the same event both times (one event id, which the
// audit log keeps once), and that each event has an id of its own.
func TestOutcomeRetryKeepsEventID(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{rules: map[string]Decision{"fx__echo": Allow}, upstreams: []Upstream{{Name: "fx", URL: up.url}}, server: fastRetries})
	e.audit.mu.Lock()
	e.audit.unacknowledged, e.audit.unacknowledgedKind = 1, KindExecuted
	e.audit.mu.Unlock()
	wantEcho(t, "the call", call(t, e.connect(alice, "", nil, ""), "fx__echo", map[string]any{"text": "once"}, nil))
	if err := e.server.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	var decision, executed []string
	for _, ev := range e.audit.events {
		if len(ev.EventID) != 32 || strings.Trim(ev.EventID, "0123456789abcdef") != "" {
			t.Errorf("%s event has id %q, want 32 lowercase hex digits", ev.Kind, ev.EventID)
		}
		switch ev.Kind {
		case KindDecision:
			decision = append(decision, ev.EventID)
		case KindExecuted:
			executed = append(executed, ev.EventID)
		}
	}
	if len(decision) != 1 || len(executed) != 2 {
		t.Fatalf("recorded %d decisions and %d outcomes, want 1 and 2 (an attempt, then its retry)", len(decision), len(executed))
	}
	if executed[0] != executed[1] || executed[0] == decision[0] {
		t.Errorf("event ids: decision %s, outcome %s then %s; want the outcome's attempts to share one, not the decision's", decision[0], executed[0], executed[1])
	}
}

// TestOutcomeWrittenNowWhenAlone checks when a call's outcome may wait to
// ride with another call's start: only while another call is in progress
// on the server, whose start or end may carry it. A call that ends alone
// has its outcome written at once (store.WriteNow).
func TestOutcomeWrittenNowWhenAlone(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	up.addTool(&mcp.Tool{Name: "slow", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"notes_list": Allow, "fx__slow": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url}},
	})
	finishes := func() []bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := e.server.outcomes.wait(ctx); err != nil {
			t.Fatal(err)
		}
		e.executions.mu.Lock()
		defer e.executions.mu.Unlock()
		return slices.Clone(e.executions.writeNow)
	}
	cs := e.connect(alice, "", nil, "")

	if res := call(t, cs, "notes_list", map[string]any{}, mcp.Meta{MetaIdempotencyKey: "alone-1"}); res.IsError {
		t.Fatalf("notes_list: %s", text(res))
	}
	if got := finishes(); !slices.Equal(got, []bool{true}) {
		t.Fatalf("a call alone: finishes marked WriteNow %v, want [true]", got)
	}

	slow := make(chan *mcp.CallToolResult, 1)
	go func() { slow <- call(t, cs, "fx__slow", map[string]any{}, mcp.Meta{MetaIdempotencyKey: "slow-1"}) }()
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the slow tool was not called")
	}
	if res := call(t, cs, "notes_list", map[string]any{}, mcp.Meta{MetaIdempotencyKey: "beside-1"}); res.IsError {
		t.Fatalf("notes_list beside the slow call: %s", text(res))
	}
	if got := finishes(); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("a call that ends while another is in progress: finishes marked WriteNow %v, want [true false]", got)
	}
	close(release)
	if res := <-slow; res.IsError {
		t.Fatalf("fx__slow: %s", text(res))
	}
	if got := finishes(); !slices.Equal(got, []bool{true, false, true}) {
		t.Errorf("the last call to end: finishes marked WriteNow %v, want [true false true]", got)
	}
}

// TestOutcomeWrittenAfterResponse checks that on the stateless endpoint a
// call's outcome is written once its response is on its way, not while the
// response is being made: every finish begins with the response sent.
func TestOutcomeWrittenAfterResponse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{rules: map[string]Decision{"notes_list": Allow}})
	cs := e.connect(alice, "", nil, "")
	const calls = 10
	for i := range calls {
		if res := call(t, cs, "notes_list", map[string]any{}, mcp.Meta{MetaIdempotencyKey: fmt.Sprintf("after-%d", i)}); res.IsError {
			t.Fatalf("notes_list: %s", text(res))
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.server.outcomes.wait(ctx); err != nil {
		t.Fatal(err)
	}
	e.executions.mu.Lock()
	got := slices.Clone(e.executions.sent)
	e.executions.mu.Unlock()
	if want := slices.Repeat([]string{"sent"}, calls); !slices.Equal(got, want) {
		t.Errorf("where each call's response was when its finish began: %v, want %v", got, want)
	}
}

// TestOutcomeWaitsForResponseWithinBound checks afterResponse: a write
// waits for its call's response to be sent, and no longer than
// outcomeHold when it never is; without a response to wait for, or once
// Drain gives up, it does not wait.
func TestOutcomeWaitsForResponseWithinBound(t *testing.T) {
	t.Parallel()
	pool := workers.New(time.Minute)
	defer pool.Close()
	o := newOutcomes(1, time.Millisecond, pool)
	write := func(ctx context.Context) <-chan time.Time {
		ran := make(chan time.Time, 1)
		o.write(ctx, "", func(context.Context, func()) { ran <- time.Now() })
		return ran
	}
	withSent := func(sent chan struct{}) context.Context {
		return context.WithValue(t.Context(), responseSentKey{}, (<-chan struct{})(sent))
	}

	sent := make(chan struct{})
	ran := write(withSent(sent))
	select {
	case <-ran:
		t.Fatal("the outcome was written before its response was sent")
	case <-time.After(20 * time.Millisecond):
	}
	close(sent)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the outcome was not written once its response was sent")
	}

	o.hold = 50 * time.Millisecond
	start := time.Now()
	select {
	case at := <-write(withSent(make(chan struct{}))):
		if waited := at.Sub(start); waited < o.hold {
			t.Errorf("a response never sent held its outcome %s, want the hold (%s)", waited, o.hold)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an outcome whose response was never sent was not written after the hold")
	}

	o.hold = time.Hour // from here on, only not waiting can write in time
	select {
	case <-write(t.Context()):
	case <-time.After(10 * time.Second):
		t.Fatal("an outcome without a response to wait for was not written")
	}
	o.cancel() // as Drain does when it gives up
	select {
	case <-write(withSent(make(chan struct{}))):
	case <-time.After(10 * time.Second):
		t.Error("after Drain gave up, an outcome still waited for its response")
	}
}
