package approvals_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// faultyAudit is a real store whose audit records, while fail is set, get
// a build that fails: in an audited approval write, the failure comes
// between the approval's write and its record's, inside their
// transaction.
type faultyAudit struct {
	store.Store
	fail atomic.Bool
}

var errInjected = errors.New("injected: the audit record cannot be built")

func (f *faultyAudit) build(build func(store.AuditHead) (store.AuditRecord, error)) func(store.AuditHead) (store.AuditRecord, error) {
	if build == nil || !f.fail.Load() {
		return build
	}
	return func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errInjected }
}

// AppendAudit fails while fail is set, as an audit record written on its
// own after the approval's write would.
func (f *faultyAudit) AppendAudit(ctx context.Context, build func(store.AuditHead) (store.AuditRecord, error)) (store.AuditRecord, error) {
	return f.Store.AppendAudit(ctx, f.build(build))
}

func (f *faultyAudit) CreateApprovalAudited(ctx context.Context, a store.Approval, build func(store.AuditHead) (store.AuditRecord, error)) (store.Approval, bool, error) {
	return f.Store.CreateApprovalAudited(ctx, a, f.build(build))
}

func (f *faultyAudit) DecideApprovalAudited(ctx context.Context, p store.DecideApprovalParams, build func(store.AuditHead) (store.AuditRecord, error)) (store.Approval, error) {
	return f.Store.DecideApprovalAudited(ctx, p, f.build(build))
}

func (f *faultyAudit) ConsumeApprovalAudited(ctx context.Context, p store.ConsumeApprovalParams, build func(store.AuditHead) (store.AuditRecord, error)) (store.Approval, store.Execution, bool, error) {
	return f.Store.ConsumeApprovalAudited(ctx, p, f.build(build))
}

// forEachFaultyEngine runs f, in parallel, on each engine's store wrapped
// in a faultyAudit.
func forEachFaultyEngine(t *testing.T, f func(t *testing.T, st *faultyAudit, e *env)) {
	for name, open := range map[string]func(testing.TB) store.Store{"SQLite": storetest.NewSQLite, "PostgreSQL": storetest.NewPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := &faultyAudit{Store: open(t)}
			f(t, st, newEnv(t, st))
		})
	}
}

// TestApprovalRecordsAtomic checks, on both engines, that a request, a
// decision and a use are each written with their audit record or not at
// all, and that after a failure the same step succeeds when retried.
func TestApprovalRecordsAtomic(t *testing.T) {
	forEachFaultyEngine(t, func(t *testing.T, st *faultyAudit, e *env) {
		ctx := t.Context()
		b := binding()

		// A request whose record fails is not stored.
		st.fail.Store(true)
		if _, err := e.svc.Request(ctx, approvals.Request{Binding: b, Tenant: alice.Tenant}); !errors.Is(err, errInjected) {
			t.Fatalf("Request with a failing record = %v, want the injected error", err)
		}
		if list, err := e.st.ListApprovals(ctx, b.Principal); err != nil || len(list) != 0 {
			t.Errorf("after a failed request the store holds %d approvals, %v", len(list), err)
		}
		if got := e.auditKinds(t); len(got) != 0 {
			t.Errorf("after a failed request the log holds %v", got)
		}
		st.fail.Store(false)
		a := e.request(t, b)
		if got := e.auditKinds(t); !slices.Equal(got, []string{"approval_requested"}) {
			t.Errorf("after the retried request the log holds %v", got)
		}

		// A decision whose record fails is not stored, and the retry
		// is not refused as already decided.
		st.fail.Store(true)
		if _, err := e.svc.Decide(ctx, a.ID, alice, true, "fine"); !errors.Is(err, errInjected) {
			t.Fatalf("Decide with a failing record = %v, want the injected error", err)
		}
		if got, err := e.st.GetApproval(ctx, a.ID); err != nil || got.Status != store.ApprovalPending || got.DecidedBy != "" {
			t.Errorf("after a failed decision the approval is %+v, %v; want pending, undecided", got, err)
		}
		st.fail.Store(false)
		if _, err := e.svc.Decide(ctx, a.ID, alice, true, "fine"); err != nil {
			t.Fatalf("the retried decision: %v", err)
		}
		if got := e.auditKinds(t); !slices.Equal(got, []string{"approval_requested", "approval_decided"}) {
			t.Errorf("after the retried decision the log holds %v", got)
		}

		// A use whose record fails neither uses the approval nor
		// starts the execution, and is an error, not "not approved".
		exec := &store.Execution{IdempotencyKey: "run-1/call-1", Principal: b.Principal, Tool: b.Tool, ArgumentsHash: b.ArgumentsHash, RunID: b.RunID}
		entry := audit.Entry{Kind: "approval_consumed", Principal: b.Principal, Tool: b.Tool}
		st.fail.Store(true)
		if _, _, _, err := e.svc.Consume(ctx, b, exec, entry); !errors.Is(err, errInjected) || errors.Is(err, approvals.ErrNotApproved) {
			t.Fatalf("Consume with a failing record = %v, want the injected error", err)
		}
		if got, err := e.st.GetApproval(ctx, a.ID); err != nil || got.Status != store.ApprovalApproved {
			t.Errorf("after a failed use the approval is %s, %v; want approved", got.Status, err)
		}
		if _, err := e.st.GetExecution(ctx, exec.IdempotencyKey); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after a failed use GetExecution = %v, want ErrNotFound", err)
		}
		st.fail.Store(false)
		used, started, err := consumeWith(e, t, b, exec, entry)
		if err != nil || used.Status != store.ApprovalConsumed || started.Status != store.ExecutionStarted || started.ApprovalID != a.ID {
			t.Fatalf("the retried use = %+v, %+v, %v", used, started, err)
		}
		records, err := e.st.AuditRecords(ctx, 0, 10)
		if err != nil || len(records) != 3 || records[2].Kind != "approval_consumed" || records[2].ApprovalID != a.ID {
			t.Errorf("after the retried use the log holds %+v, %v; want the use recorded with its approval", records, err)
		}
	})
}

// consumeWith uses the approval of b, starting exec.
func consumeWith(e *env, t *testing.T, b approvals.Binding, exec *store.Execution, entry audit.Entry) (approvals.Approval, store.Execution, error) {
	used, started, ok, err := e.svc.Consume(t.Context(), b, exec, entry)
	if err == nil && !ok {
		err = errors.New("the execution did not start")
	}
	return used, started, err
}

// TestApproverTenant checks that approver groups are groups of the
// requester's tenant: a member of a same-named group in another tenant
// neither sees (in a list or by id) nor decides the approval.
func TestApproverTenant(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		a := e.request(t, binding(), "grp-reviewers")
		eve := identity.Principal{Issuer: "https://idp.example.com", Tenant: "tenant-2", ObjectID: "eve", Groups: []string{"grp-reviewers"}}

		if _, err := e.svc.Get(ctx, a.ID, eve); !errors.Is(err, approvals.ErrNotFound) {
			t.Errorf("Get by a reviewer of another tenant = %v, want ErrNotFound", err)
		}
		if list, err := e.svc.Pending(ctx, eve); err != nil || len(list) != 0 {
			t.Errorf("Pending of a reviewer of another tenant = %d approvals, %v; want none", len(list), err)
		}
		for _, approve := range []bool{true, false} {
			if _, err := e.svc.Decide(ctx, a.ID, eve, approve, ""); !errors.Is(err, approvals.ErrNotFound) {
				t.Errorf("Decide(approve %v) by a reviewer of another tenant = %v, want ErrNotFound", approve, err)
			}
		}
		if got, err := e.st.GetApproval(ctx, a.ID); err != nil || got.Status != store.ApprovalPending || got.Tenant != alice.Tenant {
			t.Errorf("the approval is %+v, %v; want pending, of %s", got, err, alice.Tenant)
		}

		// A reviewer of the requester's tenant sees and decides it.
		if list, err := e.svc.Pending(ctx, bob); err != nil || len(list) != 1 || list[0].ID != a.ID {
			t.Errorf("Pending of bob = %v, %v; want the approval", list, err)
		}
		if _, err := e.svc.Decide(ctx, a.ID, bob, true, ""); err != nil {
			t.Errorf("Decide by bob: %v", err)
		}
	})
}

func (f *faultyAudit) RevokeApprovalsAudited(ctx context.Context, tool, keep string, now time.Time, build func(int) func(store.AuditHead) (store.AuditRecord, error)) (int, error) {
	if build == nil {
		return f.Store.RevokeApprovalsAudited(ctx, tool, keep, now, nil)
	}
	return f.Store.RevokeApprovalsAudited(ctx, tool, keep, now, func(n int) func(store.AuditHead) (store.AuditRecord, error) {
		return f.build(build(n))
	})
}

// TestRevokeChangedAtomic checks, on both engines, that the sweep's
// revocation of a changed tool's approvals is written with its audit
// record or not at all: after a failed record the approvals are still
// open, and the next sweep revokes them and records it, once.
func TestRevokeChangedAtomic(t *testing.T) {
	forEachFaultyEngine(t, func(t *testing.T, st *faultyAudit, e *env) {
		ctx := t.Context()
		pending := e.request(t, binding())
		b := binding()
		b.ArgumentsHash = "args-2"
		approved := e.approved(t, b)
		before := e.auditKinds(t)
		sw, err := approvals.NewSweeper(e.svc, &approvals.SweeperOptions{
			Tools: func(context.Context) (map[string]string, error) {
				return map[string]string{"notes_write": "def-2"}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}

		st.fail.Store(true)
		if _, _, err := sw.Sweep(ctx); !errors.Is(err, errInjected) {
			t.Fatalf("Sweep with a failing record = %v, want the injected error", err)
		}
		for id, want := range map[string]store.ApprovalStatus{pending.ID: store.ApprovalPending, approved.ID: store.ApprovalApproved} {
			if got, err := e.st.GetApproval(ctx, id); err != nil || got.Status != want {
				t.Errorf("after a failed revocation %s is %s, %v; want %s", id, got.Status, err, want)
			}
		}
		if got := e.auditKinds(t); !slices.Equal(got, before) {
			t.Errorf("after a failed revocation the log holds %v, want %v", got, before)
		}

		st.fail.Store(false)
		if revoked, _, err := sw.Sweep(ctx); err != nil || revoked != 2 {
			t.Fatalf("the next Sweep = %d revoked, %v; want 2", revoked, err)
		}
		if got := e.auditKinds(t); !slices.Equal(got, append(before, "approvals_revoked")) {
			t.Errorf("after the revocation the log holds %v, want %v and one approvals_revoked", got, before)
		}
	})
}
