package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// The atomicity tests inject a failure between two writes of one
// transaction and check that neither write is left: through core.inTx
// directly (an error of the transaction's function, a failed statement, a
// cancelled context, and on PostgreSQL the connection terminated under the
// transaction), and through the public Store's audited compositions, whose
// audit record fails to build after the domain write.

// errAtomicFault is the failure the tests inject.
var errAtomicFault = errors.New("injected fault")

// atomicEngines runs test on a fresh migrated store of each engine, as
// subtests named SQLite and PostgreSQL; the latter is skipped without
// TEST_DATABASE_URL.
func atomicEngines(t *testing.T, test func(t *testing.T, s Store, c *core)) {
	t.Run("SQLite", func(t *testing.T) {
		s := parityStore(t, filepath.Join(t.TempDir(), "usher.db"))
		test(t, s, parityCore(t, s))
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		s := parityStore(t, ownSchemaPostgresURL(t))
		test(t, s, parityCore(t, s))
	})
}

// atomicNote writes the note owner/name in x, as PutNote does, and reads
// it back there: the write happened, whatever becomes of the transaction.
func atomicNote(ctx context.Context, x executor, owner, name string) error {
	if _, err := scanNote(x.row(ctx, putNote, owner, name, "body", storedTime(time.Now()))); err != nil {
		return fmt.Errorf("write note %s: %w", name, err)
	}
	if _, err := scanNote(x.row(ctx, getNote, owner, name)); err != nil {
		return fmt.Errorf("read note %s back in the transaction: %w", name, err)
	}
	return nil
}

// atomicNoteAbsent fails the test unless the note owner/name does not exist.
func atomicNoteAbsent(t *testing.T, s Store, owner, name string) {
	t.Helper()
	if n, err := s.GetNote(t.Context(), owner, name); !errors.Is(err, ErrNotFound) {
		t.Errorf("note %s/%s after the failed transaction: %+v, %v; want ErrNotFound", owner, name, n, err)
	}
}

// atomicNotePresent fails the test unless the note owner/name exists.
func atomicNotePresent(t *testing.T, s Store, owner, name string) {
	t.Helper()
	if _, err := s.GetNote(t.Context(), owner, name); err != nil {
		t.Errorf("note %s/%s: %v", owner, name, err)
	}
}

// TestAtomicCoreRollback fails core.inTx's transaction after its first
// write, in several ways: nothing of it is left, and the store works on.
func TestAtomicCoreRollback(t *testing.T) {
	atomicEngines(t, func(t *testing.T, s Store, c *core) {
		ctx := t.Context()
		t.Run("commit", func(t *testing.T) {
			// The control: the same transaction, not failed, writes both.
			err := c.inTx(ctx, func(tx executor) error {
				if err := atomicNote(ctx, tx, "commit", "a"); err != nil {
					return err
				}
				return atomicNote(ctx, tx, "commit", "b")
			})
			if err != nil {
				t.Fatalf("inTx: %v", err)
			}
			atomicNotePresent(t, s, "commit", "a")
			atomicNotePresent(t, s, "commit", "b")
		})
		t.Run("error after a write", func(t *testing.T) {
			err := c.inTx(ctx, func(tx executor) error {
				if err := atomicNote(ctx, tx, "error", "a"); err != nil {
					return err
				}
				return errAtomicFault
			})
			if !errors.Is(err, errAtomicFault) {
				t.Errorf("inTx = %v, want the function's error", err)
			}
			atomicNoteAbsent(t, s, "error", "a")
		})
		t.Run("failed second write", func(t *testing.T) {
			// A NULL body violates notes.body's NOT NULL on both engines.
			bad := sql1(`INSERT INTO notes (owner, name, body, created_at, updated_at) VALUES ($1, $2, NULL, $3, $3)`)
			err := c.inTx(ctx, func(tx executor) error {
				if err := atomicNote(ctx, tx, "failed", "a"); err != nil {
					return err
				}
				_, err := tx.exec(ctx, bad, "failed", "b", storedTime(time.Now()))
				return err
			})
			if err == nil {
				t.Error("inTx = nil after a statement that violates NOT NULL")
			}
			atomicNoteAbsent(t, s, "failed", "a")
			atomicNoteAbsent(t, s, "failed", "b")
		})
		t.Run("cancelled between writes", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			err := c.inTx(cctx, func(tx executor) error {
				if err := atomicNote(cctx, tx, "cancelled", "a"); err != nil {
					return err
				}
				cancel()
				return atomicNote(cctx, tx, "cancelled", "b")
			})
			if err == nil {
				t.Error("inTx = nil after its context was cancelled between its writes")
			}
			atomicNoteAbsent(t, s, "cancelled", "a")
			atomicNoteAbsent(t, s, "cancelled", "b")
		})
		// The transactions above, failed, left the store usable.
		if _, err := s.PutNote(ctx, Note{Owner: "after", Name: "a", Body: "b"}); err != nil {
			t.Errorf("PutNote after the failed transactions: %v", err)
		}
	})
}

var (
	// atomicBackendPID names the connection a PostgreSQL transaction runs on.
	atomicBackendPID = postgresOnly(`SELECT pg_backend_pid()`)
)

// terminateIdleInTransaction terminates, from another connection of c's
// pool, the backend pid, which must be idle in a transaction on this
// database (the transaction's statement has returned), and waits until it
// is gone.
func terminateIdleInTransaction(ctx context.Context, c *core, pid int) error {
	var terminated bool
	err := c.read.QueryRowContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE pid = $1 AND state = 'idle in transaction' AND datname = current_database()`, pid).Scan(&terminated)
	if err != nil {
		return fmt.Errorf("terminate backend %d (idle in transaction?): %w", pid, err)
	}
	if !terminated {
		return fmt.Errorf("backend %d was not terminated", pid)
	}
	// pg_terminate_backend signals the backend; wait until it has exited,
	// so that the transaction's next statement meets a closed connection.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var alive bool
		if err := c.read.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
			return err
		}
		if !alive {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backend %d still alive 10s after pg_terminate_backend", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAtomicPostgresTerminated terminates, for real, the backend of a
// PostgreSQL transaction between its two writes, and again after both but
// before its commit: the transaction fails with an error, neither write is
// left, and the pool replaces the dead connection.
func TestAtomicPostgresTerminated(t *testing.T) {
	s := parityStore(t, ownSchemaPostgresURL(t))
	c := parityCore(t, s)
	for _, beforeCommit := range []bool{false, true} {
		name := "between writes"
		if beforeCommit {
			name = "before commit"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			owner := "terminated " + name
			attempts := 0
			err := c.inTx(ctx, func(tx executor) error {
				if attempts++; attempts > 1 {
					return errors.New("the transaction ran again after its connection was terminated")
				}
				var pid int
				if err := tx.row(ctx, atomicBackendPID).Scan(&pid); err != nil {
					return err
				}
				if err := atomicNote(ctx, tx, owner, "a"); err != nil {
					return err
				}
				if !beforeCommit {
					if err := terminateIdleInTransaction(ctx, c, pid); err != nil {
						return fmt.Errorf("%w: %w", errAtomicFault, err)
					}
				}
				if err := atomicNote(ctx, tx, owner, "b"); err != nil {
					return err
				}
				if beforeCommit {
					if err := terminateIdleInTransaction(ctx, c, pid); err != nil {
						return fmt.Errorf("%w: %w", errAtomicFault, err)
					}
				}
				return nil
			})
			if errors.Is(err, errAtomicFault) {
				t.Fatal(err)
			}
			if err == nil {
				t.Fatal("inTx = nil, though its connection was terminated")
			}
			if attempts != 1 {
				t.Errorf("the transaction ran %d times, want 1", attempts)
			}
			t.Logf("inTx: %v", err)
			// What the store's methods return of it says the database is
			// unavailable, which the API answers with 503.
			if !errors.Is(c.fail(err), ErrUnavailable) {
				t.Errorf("the terminated transaction's error, translated, is %v; want ErrUnavailable", c.fail(err))
			}
			atomicNoteAbsent(t, s, owner, "a")
			atomicNoteAbsent(t, s, owner, "b")

			// The pool recovers: more writes than it has connections, and
			// a transaction, all succeed.
			for i := range 8 {
				if _, err := s.PutNote(ctx, Note{Owner: owner, Name: fmt.Sprintf("after-%d", i), Body: "b"}); err != nil {
					t.Errorf("PutNote after the terminated transaction: %v", err)
				}
			}
			if err := c.inTx(ctx, func(tx executor) error { return atomicNote(ctx, tx, owner, "c") }); err != nil {
				t.Errorf("inTx after the terminated transaction: %v", err)
			}
			atomicNotePresent(t, s, owner, "c")
		})
	}
}

// atomicAuditBuild returns a build function of a well-formed record of
// kind, chained to the head it is given.
func atomicAuditBuild(kind string) func(AuditHead) (AuditRecord, error) {
	return func(h AuditHead) (AuditRecord, error) {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%s", h.Hash, h.Seq+1, kind))
		return AuditRecord{
			Seq: h.Seq + 1, PrevHash: h.Hash, Hash: hex.EncodeToString(sum[:]),
			At: time.Now().Truncate(time.Microsecond), Kind: kind,
		}, nil
	}
}

// atomicFailingBuild returns a build function that fails with errAtomicFault and
// counts its calls: a call means the transaction reached the audit append,
// after the composition's domain write.
func atomicFailingBuild(calls *int) func(AuditHead) (AuditRecord, error) {
	return func(AuditHead) (AuditRecord, error) {
		*calls++
		return AuditRecord{}, errAtomicFault
	}
}

// atomicAuditCount returns how many records the audit log holds.
func atomicAuditCount(t *testing.T, s Store) int {
	t.Helper()
	records, err := s.AuditRecords(t.Context(), 0, 1000)
	if err != nil {
		t.Fatalf("AuditRecords: %v", err)
	}
	return len(records)
}

// atomicApprovalState is what a composition may change of an approval.
func atomicApprovalState(t *testing.T, s Store, id string) string {
	t.Helper()
	a, err := s.GetApproval(t.Context(), id)
	if err != nil {
		t.Fatalf("GetApproval(%s): %v", id, err)
	}
	return fmt.Sprintf("status %s, decided by %q (%q) at %v, consumed at %v, updated at %v",
		a.Status, a.DecidedBy, a.DecisionReason, a.DecidedAt.UnixMicro(), a.ConsumedAt.UnixMicro(), a.UpdatedAt.UnixMicro())
}

// newAtomicApproval creates a pending approval of tool, expiring in an
// hour, and moves it to status (pending or approved).
func newAtomicApproval(t *testing.T, s Store, id, tool string, status ApprovalStatus) ApprovalBinding {
	t.Helper()
	ctx := t.Context()
	now := time.Now()
	b := ApprovalBinding{Principal: "alice", Tool: tool, DefinitionHash: "old", ArgumentsHash: "args-" + id, PolicyHash: "p"}
	if _, _, err := s.CreateApprovalAudited(ctx, Approval{ID: id, Binding: b, CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)}, nil); err != nil {
		t.Fatalf("CreateApproval(%s): %v", id, err)
	}
	if status == ApprovalApproved {
		if _, err := s.DecideApprovalAudited(ctx, DecideApprovalParams{ID: id, To: ApprovalApproved, DecidedBy: "bob", Now: now.Add(-time.Second)}, nil); err != nil {
			t.Fatalf("DecideApproval(%s): %v", id, err)
		}
	}
	return b
}

// TestAtomicAudited fails each audited composition's audit record, built
// after its domain write in the same transaction: neither the domain write
// nor a record is left, and the build's error is returned. The same call
// with a build that succeeds then writes both, so the failure was what
// kept them out.
func TestAtomicAudited(t *testing.T) {
	t.Run("DecideApprovalAudited", func(t *testing.T) {
		atomicEngines(t, func(t *testing.T, s Store, _ *core) {
			ctx := t.Context()
			newAtomicApproval(t, s, "apr-decide", "notes_write", ApprovalPending)
			before := atomicApprovalState(t, s, "apr-decide")
			calls := 0
			_, err := s.DecideApprovalAudited(ctx, DecideApprovalParams{ID: "apr-decide", To: ApprovalApproved, DecidedBy: "bob", Reason: "fine", Now: time.Now()}, atomicFailingBuild(&calls))
			if !errors.Is(err, errAtomicFault) || calls == 0 {
				t.Fatalf("DecideApprovalAudited with a failing build = %v after %d builds; want the build's error", err, calls)
			}
			if after := atomicApprovalState(t, s, "apr-decide"); after != before {
				t.Errorf("the approval changed: %s, was %s", after, before)
			}
			if n := atomicAuditCount(t, s); n != 0 {
				t.Errorf("the audit log holds %d records, want none", n)
			}

			a, err := s.DecideApprovalAudited(ctx, DecideApprovalParams{ID: "apr-decide", To: ApprovalApproved, DecidedBy: "bob", Reason: "fine", Now: time.Now()}, atomicAuditBuild("approval_decided"))
			if err != nil || a.Status != ApprovalApproved {
				t.Fatalf("DecideApprovalAudited = %s, %v; want approved", a.Status, err)
			}
			if n := atomicAuditCount(t, s); n != 1 {
				t.Errorf("the audit log holds %d records, want 1", n)
			}
		})
	})

	t.Run("ConsumeApprovalAudited", func(t *testing.T) {
		atomicEngines(t, func(t *testing.T, s Store, _ *core) {
			ctx := t.Context()
			b := newAtomicApproval(t, s, "apr-consume", "notes_write", ApprovalApproved)
			before := atomicApprovalState(t, s, "apr-consume")
			e := Execution{IdempotencyKey: "exec-consume", Principal: b.Principal, Tool: b.Tool, ArgumentsHash: b.ArgumentsHash, ApprovalID: "apr-consume"}
			calls := 0
			ee := e
			_, _, _, err := s.ConsumeApprovalAudited(ctx, ConsumeApprovalParams{ID: "apr-consume", Binding: b, Now: time.Now(), Execution: &ee}, atomicFailingBuild(&calls))
			if !errors.Is(err, errAtomicFault) || calls == 0 {
				t.Fatalf("ConsumeApprovalAudited with a failing build = %v after %d builds; want the build's error", err, calls)
			}
			if after := atomicApprovalState(t, s, "apr-consume"); after != before {
				t.Errorf("the approval changed: %s, was %s", after, before)
			}
			if x, err := s.GetExecution(ctx, e.IdempotencyKey); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetExecution = %+v, %v; want ErrNotFound", x, err)
			}
			if n := atomicAuditCount(t, s); n != 0 {
				t.Errorf("the audit log holds %d records, want none", n)
			}

			ee = e
			a, _, started, err := s.ConsumeApprovalAudited(ctx, ConsumeApprovalParams{ID: "apr-consume", Binding: b, Now: time.Now(), Execution: &ee}, atomicAuditBuild("approval_consumed"))
			if err != nil || !started || a.Status != ApprovalConsumed {
				t.Fatalf("ConsumeApprovalAudited = %s, started %v, %v; want consumed and started", a.Status, started, err)
			}
			if _, err := s.GetExecution(ctx, e.IdempotencyKey); err != nil {
				t.Errorf("GetExecution: %v", err)
			}
			if n := atomicAuditCount(t, s); n != 1 {
				t.Errorf("the audit log holds %d records, want 1", n)
			}
		})
	})

	t.Run("RevokeApprovalsAudited", func(t *testing.T) {
		atomicEngines(t, func(t *testing.T, s Store, _ *core) {
			ctx := t.Context()
			ids := []string{"apr-revoke-pending", "apr-revoke-approved"}
			newAtomicApproval(t, s, ids[0], "changed_tool", ApprovalPending)
			newAtomicApproval(t, s, ids[1], "changed_tool", ApprovalApproved)
			var before []string
			for _, id := range ids {
				before = append(before, atomicApprovalState(t, s, id))
			}
			calls := 0
			_, err := s.RevokeApprovalsAudited(ctx, "changed_tool", "new", time.Now(), func(int) func(AuditHead) (AuditRecord, error) {
				return atomicFailingBuild(&calls)
			})
			if !errors.Is(err, errAtomicFault) || calls == 0 {
				t.Fatalf("RevokeApprovalsAudited with a failing build = %v after %d builds; want the build's error", err, calls)
			}
			for i, id := range ids {
				if after := atomicApprovalState(t, s, id); after != before[i] {
					t.Errorf("approval %s changed: %s, was %s", id, after, before[i])
				}
			}
			if n := atomicAuditCount(t, s); n != 0 {
				t.Errorf("the audit log holds %d records, want none", n)
			}

			n, err := s.RevokeApprovalsAudited(ctx, "changed_tool", "new", time.Now(), func(int) func(AuditHead) (AuditRecord, error) {
				return atomicAuditBuild("approvals_revoked")
			})
			if err != nil || n != 2 {
				t.Fatalf("RevokeApprovalsAudited = %d, %v; want 2 revoked", n, err)
			}
			if n := atomicAuditCount(t, s); n != 1 {
				t.Errorf("the audit log holds %d records, want 1", n)
			}
		})
	})

	t.Run("MarkOutcomeUnknownAudited", func(t *testing.T) {
		atomicEngines(t, func(t *testing.T, s Store, _ *core) {
			ctx := t.Context()
			keys := []string{"exec-abandoned-1", "exec-abandoned-2"}
			for _, k := range keys {
				e := Execution{IdempotencyKey: k, Principal: "alice", Tool: "notes_write", ArgumentsHash: "a", StartedAt: time.Now().Add(-time.Hour)}
				if _, _, err := s.BeginExecutionAudited(ctx, e, nil); err != nil {
					t.Fatalf("BeginExecution(%s): %v", k, err)
				}
			}
			// The first execution's record builds, the second's fails:
			// the failure comes after the first is marked and recorded
			// in the transaction.
			first, good, bad := "", 0, 0
			build := func(e Execution) func(AuditHead) (AuditRecord, error) {
				if first == "" {
					first = e.IdempotencyKey
				}
				if e.IdempotencyKey == first {
					good++
					return atomicAuditBuild("outcome_unknown")
				}
				return atomicFailingBuild(&bad)
			}
			_, err := s.MarkOutcomeUnknownAudited(ctx, time.Now().Add(-time.Minute), build)
			if !errors.Is(err, errAtomicFault) || good == 0 || bad == 0 {
				t.Fatalf("MarkOutcomeUnknownAudited with a failing build = %v after %d good and %d failed builds; want the build's error after a good one", err, good, bad)
			}
			for _, k := range keys {
				if e, err := s.GetExecution(ctx, k); err != nil || e.Status != ExecutionStarted {
					t.Errorf("execution %s = %s, %v; want still started", k, e.Status, err)
				}
			}
			if n := atomicAuditCount(t, s); n != 0 {
				t.Errorf("the audit log holds %d records, want none", n)
			}

			marked, err := s.MarkOutcomeUnknownAudited(ctx, time.Now().Add(-time.Minute), func(Execution) func(AuditHead) (AuditRecord, error) {
				return atomicAuditBuild("outcome_unknown")
			})
			if err != nil || len(marked) != 2 {
				t.Fatalf("MarkOutcomeUnknownAudited = %d marked, %v; want 2", len(marked), err)
			}
			if n := atomicAuditCount(t, s); n != 2 {
				t.Errorf("the audit log holds %d records, want 2", n)
			}
		})
	})
}
