package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// A retry whose report of a denial waits for the row another retry is
// reporting it in does not report it again once that one commits: it
// asks anew. (Without the re-check, PostgreSQL's read committed update
// would report the denial twice.)
func TestPostgresDenialReportedOnceUnderRowLock(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	s := openMigrated(t, dsn)
	ctx := t.Context()
	now := time.Now()
	b := store.ApprovalBinding{Principal: "issuer|tenant|alice", Tool: "notes_write", DefinitionHash: "def-1",
		ArgumentsHash: "args-1", PolicyHash: "policy-1", ClientID: "inspector"}
	pending := func(id string, at time.Time) store.Approval {
		return store.Approval{ID: id, Binding: b, CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
	}
	if _, _, err := s.CreateApprovalAudited(ctx, pending("apr-1", now), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "apr-1", To: store.ApprovalDenied, DecidedBy: "issuer|tenant|bob", Now: now}, nil); err != nil {
		t.Fatal(err)
	}

	// The other retry: it holds the row, the denial reported.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `UPDATE approvals SET denial_reported_at = now() WHERE id = 'apr-1'`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		a   store.Approval
		err error
	}
	done := make(chan answer, 1)
	go func() {
		a, _, err := s.CreateApprovalAudited(context.Background(), pending("apr-2", now.Add(time.Second)), nil)
		done <- answer{a, err}
	}()
	waitForActivity(t, dsn, nil, `wait_event_type = 'Lock' AND query LIKE '%denial_reported_at%'`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.a.ID != "apr-2" || got.a.Status != store.ApprovalPending {
		t.Errorf("the retry that waited = %s %s, %v; want apr-2 pending: the denial was reported by the other", got.a.ID, got.a.Status, got.err)
	}
}
