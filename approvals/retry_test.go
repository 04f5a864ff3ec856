package approvals_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// keyedRetry is Consume of the approved call b with the start of its
// execution under key, as the MCP server makes it for each try of one
// tool call.
func (e *env) keyedRetry(t *testing.T, b approvals.Binding, key string) (store.Execution, bool, error) {
	exec := store.Execution{IdempotencyKey: key, Principal: b.Principal, Tool: b.Tool, ArgumentsHash: b.ArgumentsHash, RunID: b.RunID}
	_, rec, started, err := e.svc.Consume(t.Context(), b, &exec, audit.Entry{Kind: "approval_consumed", Principal: b.Principal, Tool: b.Tool})
	return rec, started, err
}

// TestRetryAfterTheApprovalWasUsed: a keyed retry of a call whose approval
// its execution used up is answered with that execution, never told that
// no approval is left (which makes the MCP server ask for a new one); a
// call under another key, or another call under the key, still is.
func TestRetryAfterTheApprovalWasUsed(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		b := binding()
		e.approved(t, b)
		if _, started, err := e.keyedRetry(t, b, "run-1/7/call_1"); err != nil || !started {
			t.Fatalf("the first try = started %v, %v; want it started", started, err)
		}
		rec, started, err := e.keyedRetry(t, b, "run-1/7/call_1")
		if err != nil || started || rec.IdempotencyKey != "run-1/7/call_1" || rec.Status != store.ExecutionStarted {
			t.Errorf("the retry = %+v, started %v, %v; want the started execution, not started again", rec, started, err)
		}
		if _, _, err := e.keyedRetry(t, b, "run-1/7/call_2"); !errors.Is(err, approvals.ErrNotApproved) {
			t.Errorf("another key = %v, want ErrNotApproved", err)
		}
		other := b
		other.ArgumentsHash = "args-2"
		if _, _, err := e.keyedRetry(t, other, "run-1/7/call_1"); !errors.Is(err, approvals.ErrNotApproved) {
			t.Errorf("another call under the key = %v, want ErrNotApproved", err)
		}
	})
}

// TestRacingRetriesAfterAnApproval: ten identical keyed retries at once
// right after an approval: one execution starts, every other retry is
// answered with it, and none is told that no approval is left.
func TestRacingRetriesAfterAnApproval(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		b := binding()
		e.approved(t, b)
		const n = 10
		var wg sync.WaitGroup
		start := make(chan struct{})
		type outcome struct {
			rec     store.Execution
			started bool
			err     error
		}
		out := make([]outcome, n)
		for i := range n {
			wg.Go(func() {
				<-start
				rec, started, err := e.keyedRetry(t, b, "run-1/9/call_1")
				out[i] = outcome{rec, started, err}
			})
		}
		close(start)
		wg.Wait()
		started := 0
		for i, o := range out {
			switch {
			case o.err != nil:
				t.Errorf("retry %d = %v, want an answer from the execution", i, o.err)
			case o.started:
				started++
			case o.rec.IdempotencyKey != "run-1/9/call_1":
				t.Errorf("retry %d answered with %+v", i, o.rec)
			}
		}
		if started != 1 {
			t.Errorf("%d retries started the execution, want 1", started)
		}
		if pending, err := e.st.ListApprovals(t.Context(), b.Principal, store.ApprovalPending); err != nil || len(pending) != 0 {
			t.Errorf("pending approvals = %d, %v; want none", len(pending), err)
		}
	})
}
