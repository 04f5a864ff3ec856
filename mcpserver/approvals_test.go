package mcpserver

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// brokenConsume is the store's approvals, whose Consume fails while fail
// is set, as a database that is down would.
type brokenConsume struct {
	storeApprovals
	fail *atomic.Bool
}

func (b brokenConsume) Consume(ctx context.Context, bd store.ApprovalBinding, e *store.Execution, ev Event) (store.Approval, store.Execution, bool, error) {
	if b.fail.Load() {
		return store.Approval{}, store.Execution{}, false, errors.New("the database is unavailable")
	}
	return b.storeApprovals.Consume(ctx, bd, e, ev)
}

// TestConsumeFailureIsNoNewApproval checks that a call whose approval
// cannot be looked up or used because of an error is answered with an
// error: it neither runs nor asks for another approval, and once the
// error is gone, the same call uses the approval granted.
func TestConsumeFailureIsNoNewApproval(t *testing.T) {
	var fail atomic.Bool
	e := newEnv(t, envConfig{server: func(o *Options) {
		o.Approvals = brokenConsume{o.Approvals.(storeApprovals), &fail}
	}})
	cs := e.connect(alice, "", nil, "")
	args := map[string]any{"name": "n", "body": "b"}
	id := approvalMeta(t, call(t, cs, "notes_write", args, nil))["id"]
	if _, err := e.store.DecideApproval(t.Context(), id, store.ApprovalApproved, alice, "", time.Now()); err != nil {
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
