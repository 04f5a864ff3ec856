package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestPostgresAuditedExecutionAfterTerminatedConnections terminates, for
// real, the backends of a database of the test's own after an execution's
// start and again before its finish: the write on a dead connection fails
// rather than hangs, the next one (on a new connection) is durable, and the
// audit log stays one intact chain. The MCP server's retries rely on this.
func TestPostgresAuditedExecutionAfterTerminatedConnections(t *testing.T) {
	s, terminate := storetest.NewPostgresDatabase(t)
	ctx := t.Context()
	log, err := audit.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	build := func(kind audit.Kind) func(store.AuditHead) (store.AuditRecord, error) {
		t.Helper()
		b, err := log.Builder(audit.Entry{Kind: kind, Principal: "p", Tool: "notes_write"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	e := store.Execution{IdempotencyKey: "k", Principal: "p", Tool: "notes_write", ArgumentsHash: "h"}
	if _, started, err := s.BeginExecutionAudited(ctx, e, build(audit.KindDecision)); err != nil || !started {
		t.Fatalf("BeginExecutionAudited = started %v, %v", started, err)
	}
	terminate()
	result := json.RawMessage(`{"content":[]}`)
	failed := 0
	for attempt := 0; ; attempt++ {
		if attempt == 10 {
			t.Fatalf("the finish failed %d times in a row", attempt)
		}
		_, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "k", Status: store.ExecutionSucceeded, Result: result, Now: time.Now()}, build(audit.KindExecuted))
		if err == nil {
			break
		}
		t.Logf("finish attempt %d: %v", attempt+1, err)
		failed++
	}
	if failed == 0 {
		t.Fatal("the finish on terminated connections did not fail: the fault was not injected")
	}
	// The pool may hold more terminated connections than the finish met:
	// each fails the one statement that finds it dead, and is dropped.
	var got store.Execution
	for range 10 {
		if got, err = s.GetExecution(ctx, "k"); err == nil {
			break
		}
	}
	if err != nil || got.Status != store.ExecutionSucceeded {
		t.Errorf("execution = %s, %v; want succeeded", got.Status, err)
	}
	var rep audit.Report
	for range 10 {
		if rep, err = audit.Verify(ctx, s); err == nil {
			break
		}
	}
	if err != nil || !rep.Intact() || rep.Records != 2 {
		t.Errorf("audit.Verify = %+v, %v; want 2 records, intact", rep, err)
	}
}
