package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testCloseWithdrawsApprovals: completing, cancelling, deleting and
// continuing a run withdraw its open approvals — pending, and approved but
// unused — as a stop does: each with the reason given and its audit
// record, in the close's transaction, decided by the run's owner; they can
// be neither decided nor used after, and other runs' approvals and
// finished ones are left as they are. A record that cannot be built
// closes nothing. Deleting a run closed already withdraws what is open
// of it.
func testCloseWithdrawsApprovals(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := &approvalFixture{t: t, s: s, now: time.Now().UTC().Truncate(time.Microsecond)}
	mustCreateRun(t, s, store.Run{ID: "run-other", Owner: "alice", Status: store.RunInProgress})
	for _, tc := range []struct {
		name  string
		close func(id string, w store.Withdrawal) error
		want  store.RunStatus
	}{
		{"complete", func(id string, w store.Withdrawal) error {
			_, err := s.CloseRun(ctx, id, store.RunCompleted, cancelledTurn, w)
			return err
		}, store.RunCompleted},
		{"cancel", func(id string, w store.Withdrawal) error {
			_, err := s.CloseRun(ctx, id, store.RunCancelled, cancelledTurn, w)
			return err
		}, store.RunCancelled},
		{"fail", func(id string, w store.Withdrawal) error {
			_, err := s.CloseRun(ctx, id, store.RunFailed, cancelledTurn, w)
			return err
		}, store.RunFailed},
		{"delete", func(id string, w store.Withdrawal) error { return s.DeleteRun(ctx, id, cancelledTurn, w) }, store.RunCancelled},
		{"continue", func(id string, w store.Withdrawal) error {
			child, first, note, summary := continueArgs(id, id+"-child")
			_, _, err := s.ContinueRun(ctx, store.ContinueRunParams{From: id, Child: child, First: first, Note: note,
				Summary: summary, MaxActive: 100, Withdrawal: w})
			return err
		}, store.RunCompleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.t = t
			id := "run-" + tc.name
			continueParent(t, s, id, "")
			b := testBinding()
			b.RunID = id
			b.ArgumentsHash = "args-" + tc.name
			f.create(f.approval(id+"-pending", b))
			used := b
			used.ArgumentsHash += "-approved"
			f.approved(id+"-approved", used)
			denied := b
			denied.ArgumentsHash += "-denied"
			f.create(f.approval(id+"-denied", denied))
			if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: id + "-denied", To: store.ApprovalDenied, DecidedBy: "alice", Now: f.now}, nil); err != nil {
				t.Fatal(err)
			}
			elsewhere := b
			elsewhere.RunID = "run-other"
			f.create(f.approval(id+"-elsewhere", elsewhere))

			// A record that cannot be built: nothing is closed or withdrawn.
			broken := store.Withdrawal{Reason: "closed", Audit: func(store.Approval) (func(store.AuditHead) (store.AuditRecord, error), error) {
				return nil, errors.New("no record")
			}}
			if err := tc.close(id, broken); err == nil {
				t.Fatal("closing with a failing record succeeded")
			}
			if r, err := s.GetRun(ctx, id); err != nil || r.Status.Terminal() || f.status(id+"-pending") != store.ApprovalPending {
				t.Fatalf("after a failed close: run %+v, %v, approval %s; want both as they were", r, err, f.status(id+"-pending"))
			}
			if err := tc.close(id, store.Withdrawal{Reason: "bad \x00 reason"}); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("closing with a NUL in the reason = %v, want ErrInvalid", err)
			}

			records := auditCount(t, s)
			var recorded []string
			reason := "You closed this session (" + tc.name + ")."
			w := store.Withdrawal{Reason: reason, Audit: func(a store.Approval) (func(store.AuditHead) (store.AuditRecord, error), error) {
				recorded = append(recorded, a.ID)
				return chained(store.AuditRecord{At: f.now, Kind: "approval_decided", Decision: "withdrawn", ApprovalID: a.ID, RunID: a.Binding.RunID}), nil
			}}
			if err := tc.close(id, w); err != nil {
				t.Fatal(err)
			}
			if r, err := s.GetRun(ctx, id); tc.name != "delete" && (err != nil || r.Status != tc.want) {
				t.Errorf("the run after the close = %+v, %v; want %s", r, err, tc.want)
			}
			for aid, want := range map[string]store.ApprovalStatus{
				id + "-pending": store.ApprovalWithdrawn, id + "-approved": store.ApprovalWithdrawn,
				id + "-denied": store.ApprovalDenied, id + "-elsewhere": store.ApprovalPending,
			} {
				if got := f.status(aid); got != want {
					t.Errorf("approval %s is %s, want %s", aid, got, want)
				}
			}
			a, err := s.GetApproval(ctx, id+"-pending")
			if err != nil || a.DecidedBy != queueOwner || a.DecisionReason != reason || a.DecidedAt.IsZero() || a.EndedAt().IsZero() {
				t.Errorf("withdrawn approval = %+v, %v; want decided by the run's owner, with the reason", a, err)
			}
			slices.Sort(recorded)
			if n := auditCount(t, s); n != records+2 || !slices.Equal(recorded, []string{id + "-approved", id + "-pending"}) {
				t.Errorf("audit records %d → %d for %v, want one per withdrawn approval", records, n, recorded)
			}
			if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: id + "-pending", To: store.ApprovalApproved, DecidedBy: "alice", Now: time.Now()}, nil); !errors.Is(err, store.ErrConflict) {
				t.Errorf("deciding a withdrawn approval = %v, want ErrConflict", err)
			}
			if _, err := consume(ctx, s, id+"-approved", used, time.Now()); !errors.Is(err, store.ErrConflict) {
				t.Errorf("using a withdrawn approval = %v, want ErrConflict", err)
			}
		})
	}
	f.t = t
	if got := f.status("run-complete-elsewhere"); got != store.ApprovalPending {
		t.Errorf("another run's approval is %s after its neighbours closed, want pending", got)
	}

	// A run closed before closing withdrew its approvals (or whose
	// approval came after its close) has them withdrawn by its deletion.
	continueParent(t, s, "run-closed", "")
	if _, err := s.CloseRun(ctx, "run-closed", store.RunCompleted, cancelledTurn, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	late := testBinding()
	late.RunID = "run-closed"
	f.create(f.approval("run-closed-pending", late))
	var recorded []string
	w := store.Withdrawal{Reason: "You deleted this session.", Audit: func(a store.Approval) (func(store.AuditHead) (store.AuditRecord, error), error) {
		recorded = append(recorded, a.ID)
		return chained(store.AuditRecord{At: f.now, Kind: "approval_decided", Decision: "withdrawn", ApprovalID: a.ID, RunID: a.Binding.RunID}), nil
	}}
	if err := s.DeleteRun(ctx, "run-closed", cancelledTurn, w); err != nil {
		t.Fatal(err)
	}
	if got := f.status("run-closed-pending"); got != store.ApprovalWithdrawn || !slices.Equal(recorded, []string{"run-closed-pending"}) {
		t.Errorf("the closed run's approval after its deletion: %s, recorded %v; want withdrawn, recorded", got, recorded)
	}
}
