package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
)

// brokenConsume is the store's approvals, whose Consume fails with err
// while fail is set, before anything commits, as a failing database does.
type brokenConsume struct {
	storeApprovals
	fail *atomic.Bool
	err  error
}

func (b brokenConsume) Consume(ctx context.Context, bd store.ApprovalBinding, e *store.Execution, ev Event) (store.Approval, store.Execution, bool, error) {
	if b.fail.Load() {
		return store.Approval{}, store.Execution{}, false, b.err
	}
	return b.storeApprovals.Consume(ctx, bd, e, ev)
}

// TestConsumeFailureIsNoNewApproval checks that a call whose approval
// cannot be looked up or used because of an error is answered with an
// error: it neither runs nor asks for another approval, and once the
// error is gone, the same call uses the approval granted.
func TestConsumeFailureIsNoNewApproval(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	e := newEnv(t, envConfig{server: func(o *Options) {
		o.Approvals = brokenConsume{o.Approvals.(storeApprovals), &fail, errors.New("the database failed")}
	}})
	cs := e.connect(alice, "", nil, "")
	args := map[string]any{"name": "n", "body": "b"}
	id := approvalMeta(t, call(t, cs, "notes_write", args, nil))["id"]
	if _, err := e.store.DecideApprovalAudited(t.Context(), store.DecideApprovalParams{ID: id, To: store.ApprovalApproved, DecidedBy: alice, Now: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}

	fail.Store(true)
	res := call(t, cs, "notes_write", args, nil)
	if !res.IsError || !strings.Contains(text(res), "error on the server") || res.Meta[MetaApproval] != nil {
		t.Errorf("the call with a failing Consume = %s %v, want a server error and no approval", text(res), res.Meta)
	}
	if pending, err := e.store.ListApprovals(t.Context(), alice, store.ApprovalPending); err != nil || len(pending) != 0 {
		t.Errorf("a failing Consume left %d pending approvals, %v; want none", len(pending), err)
	}
	if _, err := e.store.GetNote(t.Context(), alice, "n"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the call ran: %v", err)
	}

	fail.Store(false)
	if res := call(t, cs, "notes_write", args, nil); res.IsError {
		t.Errorf("the retried call = %s", text(res))
	}
	if a, err := e.store.GetApproval(t.Context(), id); err != nil || a.Status != store.ApprovalConsumed {
		t.Errorf("the approval is %s, %v; want consumed", a.Status, err)
	}
}

// ambiguousConsume is the store's approvals whose next Consume, while
// fault is set, fails after writing (failAfter: a commit whose answer was
// lost) or before (failBefore).
type ambiguousConsume struct {
	storeApprovals
	fault *atomic.Int32
}

func (a ambiguousConsume) Consume(ctx context.Context, bd store.ApprovalBinding, e *store.Execution, ev Event) (store.Approval, store.Execution, bool, error) {
	switch fault(a.fault.Swap(int32(noFault))) {
	case failBefore:
		return store.Approval{}, store.Execution{}, false, errInjected
	case failAfter:
		if _, _, _, err := a.storeApprovals.Consume(ctx, bd, e, ev); err != nil {
			return store.Approval{}, store.Execution{}, false, err
		}
		return store.Approval{}, store.Execution{}, false, errInjected
	}
	return a.storeApprovals.Consume(ctx, bd, e, ev)
}

// approvedCall is an env whose notes_write call with the key k-1 has been
// approved, with its Consume faults and its executions' faults.
type approvedCall struct {
	*env
	consume *atomic.Int32
	faults  *faultyExecutions
	cs      *mcp.ClientSession
	id      string
}

func newApprovedCall(t *testing.T, st store.Store) *approvedCall {
	t.Helper()
	ac := &approvedCall{consume: &atomic.Int32{}}
	install := faulty(&ac.faults, nil)
	ac.env = newEnv(t, envConfig{store: st, server: func(o *Options) {
		fastRetries(o)
		o.Approvals = ambiguousConsume{o.Approvals.(storeApprovals), ac.consume}
		install(o)
	}})
	ac.cs = ac.connect(alice, "", nil, "")
	ac.id = approvalMeta(t, ac.write(t))["id"]
	if _, err := ac.store.DecideApprovalAudited(t.Context(), store.DecideApprovalParams{ID: ac.id, To: store.ApprovalApproved, DecidedBy: alice, Now: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	return ac
}

func (ac *approvedCall) write(t *testing.T) *mcp.CallToolResult {
	t.Helper()
	return call(t, ac.cs, "notes_write", map[string]any{"name": "n", "body": "b"}, mcp.Meta{MetaIdempotencyKey: "k-1"})
}

// wantRun makes the call and checks that it ran, once, on its approval.
func (ac *approvedCall) wantRun(t *testing.T, what string) {
	t.Helper()
	if res := ac.write(t); res.IsError {
		t.Fatalf("%s = %s, want it run", what, text(res))
	}
	if _, err := ac.store.GetNote(t.Context(), alice, "n"); err != nil {
		t.Errorf("%s did not run: %v", what, err)
	}
	ac.drain(t)
	if a, e := ac.state(t); a != store.ApprovalConsumed || e != store.ExecutionSucceeded {
		t.Errorf("after %s: approval %s, execution %q; want consumed, succeeded", what, a, e)
	}
}

// drain waits for the outcome writes.
func (ac *approvedCall) drain(t *testing.T) {
	t.Helper()
	if err := ac.server.Drain(t.Context()); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// state returns the approval's status and the execution's.
func (ac *approvedCall) state(t *testing.T) (store.ApprovalStatus, store.ExecutionStatus) {
	t.Helper()
	a, err := ac.store.GetApproval(t.Context(), ac.id)
	if err != nil {
		t.Fatal(err)
	}
	var status store.ExecutionStatus
	for _, k := range ac.audit.keys() {
		if e, err := ac.store.GetExecution(t.Context(), k); err == nil {
			status = e.Status
		}
	}
	return a.Status, status
}

// TestConsumeThatCommittedRuns checks, on both engines, that a use of an
// approval whose answer was lost after it committed (the approval used,
// the execution started) is read back and the call runs, once.
func TestConsumeThatCommittedRuns(t *testing.T) {
	t.Parallel()
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			ac := newApprovedCall(t, eng.open(t))
			ac.consume.Store(int32(failAfter))
			ac.wantRun(t, "the call whose use committed")
		})
	}
}

// TestConsumeThatFailedKeepsApproval checks that a use of an approval that
// failed without committing is answered as a server error, nothing run,
// and that the retry uses the approval.
func TestConsumeThatFailedKeepsApproval(t *testing.T) {
	t.Parallel()
	ac := newApprovedCall(t, nil)
	ac.consume.Store(int32(failBefore))
	if res := ac.write(t); !res.IsError || !strings.Contains(text(res), "error on the server") {
		t.Fatalf("the call whose use failed = %s, want a server error", text(res))
	}
	if a, e := ac.state(t); a != store.ApprovalApproved || e != "" {
		t.Errorf("after a failed use: approval %s, execution %q; want approved, none", a, e)
	}
	ac.wantRun(t, "the retry")
}

// TestConsumeUnconfirmed checks that a use of an approval that may have
// committed and whose execution cannot be read back is answered
// truthfully (not run, unconfirmed), runs nothing, and that the
// execution, once readable, is finished failed, not run.
func TestConsumeUnconfirmed(t *testing.T) {
	t.Parallel()
	ac := newApprovedCall(t, nil)
	ac.consume.Store(int32(failAfter))
	// The call's first read, before its approval is looked for, succeeds.
	first := ac.faults.count("get") + 1
	ac.faults.setRule(func(method string, n int, _ store.ExecutionStatus) fault {
		if method == "get" && n > first {
			return failBefore
		}
		return noFault
	})
	res := ac.write(t)
	if !res.IsError || !strings.Contains(text(res), "was not run") || !strings.Contains(text(res), "could not be confirmed") {
		t.Errorf("the call = %q, want it reported not run and its use unconfirmed", text(res))
	}
	if _, err := ac.store.GetNote(t.Context(), alice, "n"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the call ran: %v", err)
	}
	ac.faults.setRule(nil)
	ac.drain(t)
	if a, e := ac.state(t); a != store.ApprovalConsumed || e != store.ExecutionFailed {
		t.Errorf("approval %s, execution %q; want consumed, failed (not run)", a, e)
	}
}

// errOutOfReach is the error of a store whose database cannot be reached.
var errOutOfReach = fmt.Errorf("audit: append: %w", store.ErrUnavailable)

// TestCallWhenTheDatabaseIsOutOfReach checks what a call is told when its
// records cannot be written because the database is out of reach: that it
// was not run and may be tried again shortly (unavailableText), where a
// failure of another kind is the generic server error; nothing runs.
func TestCallWhenTheDatabaseIsOutOfReach(t *testing.T) {
	t.Parallel()
	args := map[string]any{"name": "n", "body": "b"}
	t.Run("decision record", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			err  error
			want string
		}{
			{errOutOfReach, unavailableText},
			{errors.New("audit: append: disk full"), "error on the server"},
		} {
			e := newEnv(t, envConfig{server: func(o *Options) {
				o.Auditor = recordFunc(func(context.Context, Event) error { return tt.err })
			}})
			cs := e.connect(alice, "", nil, "")
			if res := call(t, cs, "notes_write", args, nil); !res.IsError || !strings.Contains(text(res), tt.want) || res.Meta[MetaApproval] != nil {
				t.Errorf("a call whose decision's record fails with %q = %s %v, want %q and no approval", tt.err, text(res), res.Meta, tt.want)
			}
			if _, err := e.store.GetNote(t.Context(), alice, "n"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the call ran: %v", err)
			}
		}
	})
	t.Run("approval's use", func(t *testing.T) {
		t.Parallel()
		var fail atomic.Bool
		e := newEnv(t, envConfig{server: func(o *Options) {
			o.Approvals = brokenConsume{o.Approvals.(storeApprovals), &fail, fmt.Errorf("consume: %w", store.ErrUnavailable)}
		}})
		cs := e.connect(alice, "", nil, "")
		id := approvalMeta(t, call(t, cs, "notes_write", args, nil))["id"]
		if _, err := e.store.DecideApprovalAudited(t.Context(), store.DecideApprovalParams{ID: id, To: store.ApprovalApproved, DecidedBy: alice, Now: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
		fail.Store(true)
		if res := call(t, cs, "notes_write", args, nil); !res.IsError || text(res) != unavailableText {
			t.Errorf("the call whose approval's use fails with the database out of reach = %s, want %q", text(res), unavailableText)
		}
		fail.Store(false)
		if res := call(t, cs, "notes_write", args, nil); res.IsError {
			t.Errorf("the call once the database is back = %s, want it run with the approval granted", text(res))
		}
	})
}
