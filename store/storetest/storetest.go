package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// Engine is how the conformance suite gets stores of an engine, each on a
// fresh database of its own and closed when the test ends.
type Engine struct {
	// Open returns a store whose database is empty, not yet migrated
	// (the suite tests migrating it): OpenSQLite and OpenPostgres do that.
	Open func(t *testing.T) store.Store
	// Migrated, if set, returns a store whose database is migrated, as
	// NewSQLite's copy of a migrated file; else the suite migrates one
	// that Open returns.
	Migrated func(t *testing.T) store.Store
}

// Run runs the conformance suite: the behaviour every store.Store engine
// must have. The subtests run in parallel, each on a store of its own.
func Run(t *testing.T, e Engine) {
	t.Run("Migrate", func(t *testing.T) {
		t.Parallel()
		testMigrate(t, e.Open(t))
	})
	newStore := func(t *testing.T) store.Store {
		t.Helper()
		if e.Migrated != nil {
			return e.Migrated(t)
		}
		s := e.Open(t)
		if err := s.Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		return s
	}

	tests := []struct {
		name string
		test func(t *testing.T, s store.Store)
	}{
		{"CreateGetList", testCreateGetList},
		{"ModelUsage", testModelUsage},
		{"CreateRunInvalid", testCreateRunInvalid},
		{"NotFound", testNotFound},
		{"CreateRunConflict", testCreateRunConflict},
		{"TransitionRun", testTransitionRun},
		{"TransitionRunRace", testTransitionRunRace},
		{"AppendEventConcurrent", testAppendEventConcurrent},
		{"AppendEventPayload", testAppendEventPayload},
		{"OpenRun", testOpenRun},
		{"OpenRunLimitRace", testOpenRunLimitRace},
		{"PostMessage", testPostMessage},
		{"PostMessageOnce", testPostMessageOnce},
		{"PostMessageOnceRace", testPostMessageOnceRace},
		{"QueuedTrace", testQueuedTrace},
		{"RetryBackoff", testRetryBackoff},
		{"ReleaseQueuesWork", testReleaseQueuesWork},
		{"NextClaimAt", testNextClaimAt},
		{"ClaimAndFence", testClaimAndFence},
		{"FencedWrites", testFencedWrites},
		{"FencedAppendRace", testFencedAppendRace},
		{"EndLease", testEndLease},
		{"TurnBatches", testTurnBatches},
		{"RunContext", testRunContext},
		{"Snapshots", testSnapshots},
		{"ContinueRun", testContinueRun},
		{"PurgeDeletedRuns", testPurgeDeletedRuns},
		{"DeleteInactiveRuns", testDeleteInactiveRuns},
		{"LegalHolds", testLegalHolds},
		{"StopTurn", testStopTurn},
		{"StopWithdrawsApprovals", testStopWithdrawsApprovals},
		{"CloseWithdrawsApprovals", testCloseWithdrawsApprovals},
		{"KeepStoppedReply", testKeepStoppedReply},
		{"RenameRun", testRenameRun},
		{"SetRunMetadata", testSetRunMetadata},
		{"SearchMessages", testSearchMessages},
		{"ForkOnce", testForkOnce},
		{"SnapshotRace", testSnapshotRace},
		{"Branches", testBranches},
		{"BranchRefusals", testBranchRefusals},
		{"BranchSnapshots", testBranchSnapshots},
		{"BranchRace", testBranchRace},
		{"DeleteMessage", testDeleteMessage},
		{"DeleteMessageRefusals", testDeleteMessageRefusals},
		{"DeleteSnapshots", testDeleteSnapshots},
		{"LeaseTakeover", testLeaseTakeover},
		{"RequeueLeases", testRequeueLeases},
		{"Holds", testHolds},
		{"MCPSessions", testMCPSessions},
		{"UpstreamSessions", testUpstreamSessions},
		{"UpstreamSessionsIdle", testUpstreamSessionsIdle},
		{"UpstreamSessionsReseal", testUpstreamSessionsReseal},
		{"MCPAnswers", testMCPAnswers},
		{"MCPEvents", testMCPEvents},
		{"Steps", testSteps},
		{"Attachments", testAttachments},
		{"CloseRunEndsStep", testCloseRunEndsStep},
		{"AuditSinkCursor", testAuditSinkCursor},
		{"AuditSinkLease", testAuditSinkLease},
		{"AuditSinkClaimRace", testAuditSinkClaimRace},
		{"ClaimRace", testClaimRace},
		{"CloseRun", testCloseRun},
		{"CloseRunEndsWaitingTurns", testCloseRunEndsWaitingTurns},
		{"ParkIdleRuns", testParkIdleRuns},
		{"ParkRun", testParkRun},
		{"Settings", testSettings},
		{"Pins", testPins},
		{"ListMessages", testListMessages},
		{"WakeUps", testWakeUps},
		{"RunsToResume", testRunsToResume},
		{"Updates", testUpdates},
		{"UpdatesFanOut", testUpdatesFanOut},
		{"UpdatesSlowSubscriber", testUpdatesSlowSubscriber},
		{"Times", testTimes},
		{"SigningKeys", testSigningKeys},
		{"SigningKeyRotationRace", testSigningKeyRotationRace},
		{"CreateApproval", testCreateApproval},
		{"CreateApprovalAfterEnd", testCreateApprovalAfterEnd},
		{"CreateApprovalAfterDenial", testCreateApprovalAfterDenial},
		{"CreateApprovalInvalid", testCreateApprovalInvalid},
		{"CreateApprovalConcurrent", testCreateApprovalConcurrent},
		{"ListApprovals", testListApprovals},
		{"ListDecidedApprovals", testListDecidedApprovals},
		{"ListTenantApprovals", testListTenantApprovals},
		{"DecideApproval", testDecideApproval},
		{"ConsumeApproval", testConsumeApproval},
		{"ConsumeApprovalRace", testConsumeApprovalRace},
		{"RevokeApprovals", testRevokeApprovals},
		{"RevokeApprovalsAudited", testRevokeApprovalsAudited},
		{"ExpireApprovals", testExpireApprovals},
		{"ApprovalsAudited", testApprovalsAudited},
		{"ConsumeApprovalAuditedRace", testConsumeApprovalAuditedRace},
		{"BeginExecution", testBeginExecution},
		{"BeginExecutionRace", testBeginExecutionRace},
		{"AwaitInput", testAwaitInput},
		{"EndAwaitingInput", testEndAwaitingInput},
		{"MarkOutcomeUnknown", testMarkOutcomeUnknown},
		{"MarkOutcomeUnknownAudited", testMarkOutcomeUnknownAudited},
		{"Notes", testNotes},
		{"BrowserSessions", testBrowserSessions},
		{"BrowserSessionRevokeRace", testBrowserSessionRevokeRace},
		{"OAuthClients", testOAuthClients},
		{"AuthorizationCodes", testAuthorizationCodes},
		{"AuthorizationCodeRace", testAuthorizationCodeRace},
		{"RefreshTokens", testRefreshTokens},
		{"RefreshTokenRotateRace", testRefreshTokenRotateRace},
		{"RefreshRepeats", testRefreshRepeats},
		{"OAuthGrants", testOAuthGrants},
		{"OAuthGrantRace", testOAuthGrantRace},
		{"OAuthRevokeCascade", testOAuthRevokeCascade},
		{"Consents", testConsents},
		{"DeleteExpiredOAuth", testDeleteExpiredOAuth},
		{"ConsentAnswers", testConsentAnswers},
		{"RevokedGrants", testRevokedGrants},
		{"RevokedGrantsOfClients", testRevokedGrantsOfClients},
		{"ConfiguredClients", testConfiguredClients},
		{"ClientAssertions", testClientAssertions},
		{"AppendAudit", testAppendAudit},
		{"AppendAuditConcurrent", testAppendAuditConcurrent},
		{"AppendAuditEventID", testAppendAuditEventID},
		{"QueryAudit", testQueryAudit},
		{"AuditCheckpoints", testAuditCheckpoints},
		{"AuditCheckpointRace", testAuditCheckpointRace},
		{"Replicas", testReplicas},
		{"RunQueue", testRunQueue},
		{"ApprovalBacklog", testApprovalBacklog},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.test(t, newStore(t))
		})
	}
}

func testMigrate(t *testing.T, s store.Store) {
	ctx := t.Context()
	err := s.Ready(ctx)
	if err == nil {
		t.Fatal("Ready before Migrate = nil, want an error naming the pending migrations")
	}
	if !strings.Contains(err.Error(), "pending") {
		t.Errorf("Ready before Migrate = %q, want it to name the pending migrations", err)
	}

	// Several callers at once, as several replicas starting together.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate #%d: %v", i, err)
		}
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready after Migrate: %v", err)
	}
}

func testCreateGetList(t *testing.T, s store.Store) {
	ctx := t.Context()
	// IDs grow in creation order, so newest first is also descending ID
	// order, even when two runs share a creation time.
	created := []store.Run{
		mustCreateRun(t, s, store.Run{ID: "run-1", Owner: "alice", Title: "first", Status: store.RunInProgress}),
		mustCreateRun(t, s, store.Run{ID: "run-2", Owner: "bob", Title: "other", Status: store.RunIdle}),
		mustCreateRun(t, s, store.Run{ID: "run-3", Owner: "alice", Title: "second", Status: store.RunAwaitingApproval}),
		mustCreateRun(t, s, store.Run{ID: "run-4", Owner: "alice", Title: "third", Status: store.RunInProgress}),
	}

	first := created[0]
	if first.ID != "run-1" || first.Owner != "alice" || first.Title != "first" || first.Status != store.RunInProgress {
		t.Errorf("CreateRun returned %+v, want the fields it was given", first)
	}
	if first.LastSeq != 0 || first.MessageCount != 0 || first.Preview != "" || first.FencingToken != 0 ||
		first.LeaseOwner != "" || !first.LeaseExpiresAt.IsZero() || !first.QueuedAt.IsZero() ||
		!first.CompletedAt.IsZero() || !first.DeletedAt.IsZero() || first.IdempotencyKey != "" {
		t.Errorf("CreateRun returned %+v, want zero counters, no lease, no queue, no key", first)
	}
	checkStoreTime(t, "CreatedAt", first.CreatedAt)
	if first.UpdatedAt != first.CreatedAt || first.LastActivityAt != first.CreatedAt {
		t.Errorf("UpdatedAt %v, LastActivityAt %v, want both = CreatedAt %v",
			first.UpdatedAt, first.LastActivityAt, first.CreatedAt)
	}

	for _, want := range created {
		got, err := s.GetRun(ctx, want.ID)
		if err != nil {
			t.Fatalf("GetRun(%s): %v", want.ID, err)
		}
		if got != want {
			t.Errorf("GetRun(%s) = %+v, want what CreateRun returned: %+v", want.ID, got, want)
		}
	}

	list, err := s.ListRuns(ctx, "alice")
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	want := []store.Run{created[3], created[2], created[0]}
	if !slices.Equal(list, want) {
		t.Errorf("ListRuns(alice) = %v, want newest first %v", runIDs(list), runIDs(want))
	}
	for i := 1; i < len(list); i++ {
		if list[i].CreatedAt.After(list[i-1].CreatedAt) {
			t.Errorf("ListRuns: %s created after %s but listed later", list[i].ID, list[i-1].ID)
		}
	}
	if list, err := s.ListRuns(ctx, "nobody"); err != nil || len(list) != 0 {
		t.Errorf("ListRuns(nobody) = %v, %v; want none, nil", runIDs(list), err)
	}
}

func testCreateRunInvalid(t *testing.T, s store.Store) {
	tests := []struct {
		name string
		run  store.Run
	}{
		{"no ID", store.Run{Owner: "alice", Status: store.RunInProgress}},
		{"no owner", store.Run{ID: "run-1", Status: store.RunInProgress}},
		{"no status", store.Run{ID: "run-1", Owner: "alice"}},
		{"unknown status", store.Run{ID: "run-1", Owner: "alice", Status: "Running"}},
		{"queued beyond year 9999", store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress,
			QueuedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.CreateRun(t.Context(), tt.run); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("CreateRun(%+v) = %v, want ErrInvalid", tt.run, err)
			}
		})
	}
	if _, err := s.GetRun(t.Context(), "run-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRun after refused creations = %v, want ErrNotFound", err)
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.GetRun(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRun(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.TransitionRun(ctx, "missing", store.RunInProgress, store.RunIdle); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TransitionRun(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.AppendEvent(ctx, "missing", "user.message", json.RawMessage(`{}`)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AppendEvent(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.ListEvents(ctx, "missing", 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListEvents(missing) = %v, want ErrNotFound", err)
	}
	if errors.Is(store.ErrNotFound, store.ErrConflict) || errors.Is(store.ErrConflict, store.ErrNotFound) {
		t.Error("ErrNotFound and ErrConflict must be distinct")
	}
}

func testCreateRunConflict(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreateRun(t, s, store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress})
	if _, err := s.CreateRun(ctx, store.Run{ID: "run-1", Owner: "bob", Status: store.RunIdle}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateRun with a duplicate ID = %v, want ErrConflict", err)
	}
	if r, err := s.GetRun(ctx, "run-1"); err != nil || r.Owner != "alice" {
		t.Errorf("GetRun after the duplicate = %+v, %v; want alice's run unchanged", r, err)
	}

	keyed := mustCreateRun(t, s, store.Run{ID: "run-2", Owner: "alice", Status: store.RunInProgress, IdempotencyKey: "key-1"})
	if keyed.IdempotencyKey != "key-1" {
		t.Errorf("IdempotencyKey = %q, want key-1", keyed.IdempotencyKey)
	}
	if _, err := s.CreateRun(ctx, store.Run{ID: "run-3", Owner: "alice", Status: store.RunInProgress, IdempotencyKey: "key-1"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateRun with the owner's idempotency key again = %v, want ErrConflict", err)
	}
	if _, err := s.GetRun(ctx, "run-3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRun(run-3) after its refused creation = %v, want ErrNotFound", err)
	}
	// The key is per owner; and runs without a key never collide.
	mustCreateRun(t, s, store.Run{ID: "run-4", Owner: "bob", Status: store.RunInProgress, IdempotencyKey: "key-1"})
	mustCreateRun(t, s, store.Run{ID: "run-5", Owner: "alice", Status: store.RunInProgress})
	mustCreateRun(t, s, store.Run{ID: "run-6", Owner: "alice", Status: store.RunInProgress})
}

func testTransitionRun(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := mustCreateRun(t, s, store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress})

	got, err := s.TransitionRun(ctx, r.ID, store.RunInProgress, store.RunAwaitingApproval)
	if err != nil {
		t.Fatalf("TransitionRun InProgress → AwaitingApproval: %v", err)
	}
	if got.Status != store.RunAwaitingApproval || got.UpdatedAt.Before(r.UpdatedAt) || !got.CompletedAt.IsZero() {
		t.Errorf("TransitionRun returned %+v, want AwaitingApproval, UpdatedAt ≥ %v, not completed", got, r.UpdatedAt)
	}
	if got.CreatedAt != r.CreatedAt || got.LastSeq != r.LastSeq || got.Owner != r.Owner {
		t.Errorf("TransitionRun changed more than the status: %+v, was %+v", got, r)
	}
	checkStoreTime(t, "UpdatedAt", got.UpdatedAt)
	if stored, err := s.GetRun(ctx, r.ID); err != nil || stored != got {
		t.Errorf("GetRun after TransitionRun = %+v, %v; want %+v", stored, err, got)
	}

	// The expected state no longer holds: nothing changes.
	if _, err := s.TransitionRun(ctx, r.ID, store.RunInProgress, store.RunIdle); !errors.Is(err, store.ErrConflict) {
		t.Errorf("TransitionRun from a stale status = %v, want ErrConflict", err)
	}
	if stored, err := s.GetRun(ctx, r.ID); err != nil || stored.Status != store.RunAwaitingApproval {
		t.Errorf("after the failed swap the run is %+v, %v; want still AwaitingApproval", stored, err)
	}

	done, err := s.TransitionRun(ctx, r.ID, store.RunAwaitingApproval, store.RunCompleted)
	if err != nil {
		t.Fatalf("TransitionRun AwaitingApproval → Completed: %v", err)
	}
	if done.Status != store.RunCompleted || done.CompletedAt.IsZero() || done.CompletedAt != done.UpdatedAt {
		t.Errorf("completed run %+v, want Completed with CompletedAt = UpdatedAt", done)
	}

	invalid := []struct{ from, to store.RunStatus }{
		{store.RunCompleted, store.RunInProgress}, // terminal
		{store.RunCancelled, store.RunIdle},       // terminal
		{"Running", store.RunIdle},                // unknown
		{store.RunInProgress, ""},                 // unknown
	}
	for _, tt := range invalid {
		if _, err := s.TransitionRun(ctx, r.ID, tt.from, tt.to); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("TransitionRun(%q → %q) = %v, want ErrInvalid", tt.from, tt.to, err)
		}
	}
}

func testTransitionRunRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := mustCreateRun(t, s, store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress})
	targets := []store.RunStatus{store.RunIdle, store.RunAwaitingApproval, store.RunCancelled, store.RunFailed}

	const racers = 8
	start := make(chan struct{})
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			_, errs[i] = s.TransitionRun(ctx, r.ID, store.RunInProgress, targets[i%len(targets)])
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner < 0:
			winner = i
		case err == nil:
			t.Errorf("racers %d and %d both won the swap from InProgress", winner, i)
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("losing racer %d: %v, want ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no racer won the swap from InProgress")
	}
	if got, err := s.GetRun(ctx, r.ID); err != nil || got.Status != targets[winner%len(targets)] {
		t.Errorf("run after the race is %+v, %v; want the winner's status %s", got, err, targets[winner%len(targets)])
	}
}

func testAppendEventConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := mustCreateRun(t, s, store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress})
	other := mustCreateRun(t, s, store.Run{ID: "run-2", Owner: "alice", Status: store.RunInProgress})

	const writers, perWriter = 8, 25
	const total = writers * perWriter
	seqs := make([][]int64, writers)
	payloads := make([]map[int64]json.RawMessage, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		payloads[w] = map[int64]json.RawMessage{}
		wg.Go(func() {
			<-start
			for i := range perWriter {
				p := json.RawMessage(fmt.Sprintf(`{"writer":%d,"i":%d}`, w, i))
				e, err := s.AppendEvent(ctx, r.ID, "test.event", p)
				if err != nil {
					t.Errorf("writer %d: AppendEvent: %v", w, err)
					return
				}
				if e.RunID != r.ID || e.Type != "test.event" {
					t.Errorf("AppendEvent returned %+v", e)
				}
				seqs[w] = append(seqs[w], e.Seq)
				payloads[w][e.Seq] = p
			}
		})
	}
	// Another run's log, written meanwhile, is numbered on its own.
	wg.Go(func() {
		<-start
		for i := range 5 {
			e, err := s.AppendEvent(ctx, other.ID, "test.other", nil)
			if err != nil {
				t.Errorf("AppendEvent(%s): %v", other.ID, err)
				return
			}
			if e.Seq != int64(i+1) {
				t.Errorf("event %d of %s has seq %d, want %d", i, other.ID, e.Seq, i+1)
			}
		}
	})
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	want := map[int64]json.RawMessage{}
	for w := range writers {
		if !slices.IsSorted(seqs[w]) {
			t.Errorf("writer %d got decreasing sequences %v", w, seqs[w])
		}
		for seq, p := range payloads[w] {
			if _, dup := want[seq]; dup {
				t.Errorf("sequence %d handed out twice", seq)
			}
			want[seq] = p
		}
	}
	for seq := int64(1); seq <= total; seq++ {
		if _, ok := want[seq]; !ok {
			t.Errorf("sequence %d missing: sequences must be 1..%d without gaps", seq, total)
		}
	}

	all, err := s.ListEvents(ctx, r.ID, 0, total+10)
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	if len(all) != total {
		t.Fatalf("ListEvents returned %d events, want %d", len(all), total)
	}
	for i, e := range all {
		if e.Seq != int64(i+1) || e.RunID != r.ID || e.Type != "test.event" || !jsonEqual(e.Payload, want[e.Seq]) {
			t.Fatalf("event %d = {Seq:%d RunID:%s Type:%s Payload:%s}, want seq %d with payload %s",
				i, e.Seq, e.RunID, e.Type, e.Payload, i+1, want[int64(i+1)])
		}
		checkStoreTime(t, "event CreatedAt", e.CreatedAt)
	}

	// Paging with after and limit walks the same log in order.
	var paged []int64
	for after := int64(0); ; {
		page, err := s.ListEvents(ctx, r.ID, after, 30)
		if err != nil {
			t.Fatalf("ListEvents(after %d): %v", after, err)
		}
		if len(page) > 30 {
			t.Fatalf("ListEvents(limit 30) returned %d events", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			paged = append(paged, e.Seq)
		}
		after = page[len(page)-1].Seq
	}
	if len(paged) != total || !slices.IsSorted(paged) || paged[0] != 1 || paged[total-1] != total {
		t.Errorf("paging returned %d sequences from %v to %v, want 1..%d in order", len(paged), paged[0], paged[len(paged)-1], total)
	}

	got, err := s.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	if got.LastSeq != total {
		t.Errorf("LastSeq = %d, want %d", got.LastSeq, total)
	}
	if got.LastActivityAt.Before(all[total-1].CreatedAt) || got.UpdatedAt.Before(all[total-1].CreatedAt) {
		t.Errorf("LastActivityAt %v, UpdatedAt %v; want both ≥ the last event's %v",
			got.LastActivityAt, got.UpdatedAt, all[total-1].CreatedAt)
	}
}

func testAppendEventPayload(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := mustCreateRun(t, s, store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress})

	e, err := s.AppendEvent(ctx, r.ID, "agent.turn.end", nil)
	if err != nil {
		t.Fatalf("AppendEvent(nil payload): %v", err)
	}
	if e.Seq != 1 || string(e.Payload) != "{}" {
		t.Errorf("AppendEvent(nil payload) = seq %d payload %s, want seq 1 payload {}", e.Seq, e.Payload)
	}
	spaced := json.RawMessage(` { "text" : "héllo \u2603 \ud83d\ude00 \\u0000", "n": [1, 2.5, null, true] } `)
	if _, err := s.AppendEvent(ctx, r.ID, "user.message", spaced); err != nil {
		t.Fatalf("AppendEvent: %v", err)
	}

	refused := []struct {
		name, typ string
		payload   json.RawMessage
	}{
		{"truncated JSON", "user.message", json.RawMessage(`{"text":`)},
		{"not JSON", "user.message", json.RawMessage(`hello`)},
		{"two values", "user.message", json.RawMessage(`{} {}`)},
		{"no type", "", json.RawMessage(`{}`)},
		// What PostgreSQL's jsonb cannot hold, every engine refuses.
		{"escaped NUL", "user.message", json.RawMessage(`{"text":"a\u0000b"}`)},
		{"escaped NUL in a key", "user.message", json.RawMessage(`{"\u0000":1}`)},
		{"lone high surrogate", "user.message", json.RawMessage(`["\ud800"]`)},
		{"high surrogate before a letter", "user.message", json.RawMessage(`"\ud800\u0041"`)},
		{"lone low surrogate", "user.message", json.RawMessage(`"\udc00"`)},
	}
	for _, tt := range refused {
		if _, err := s.AppendEvent(ctx, r.ID, tt.typ, tt.payload); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("AppendEvent(%s) = %v, want ErrInvalid", tt.name, err)
		}
	}
	if _, err := s.ListEvents(ctx, r.ID, 0, 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ListEvents(limit 0) = %v, want ErrInvalid", err)
	}

	// The refused events took no sequence.
	e, err = s.AppendEvent(ctx, r.ID, "agent.message", json.RawMessage(`"done"`))
	if err != nil || e.Seq != 3 {
		t.Fatalf("AppendEvent after refusals = seq %d, %v; want seq 3", e.Seq, err)
	}
	events, err := s.ListEvents(ctx, r.ID, 0, 100)
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	want := []json.RawMessage{json.RawMessage(`{}`), spaced, json.RawMessage(`"done"`)}
	if len(events) != len(want) {
		t.Fatalf("ListEvents returned %d events, want %d", len(events), len(want))
	}
	for i, e := range events {
		if e.Seq != int64(i+1) || !jsonEqual(e.Payload, want[i]) {
			t.Errorf("event %d = seq %d payload %s, want seq %d payload %s", i, e.Seq, e.Payload, i+1, want[i])
		}
	}
	if page, err := s.ListEvents(ctx, r.ID, 3, 10); err != nil || len(page) != 0 {
		t.Errorf("ListEvents after the last event = %d events, %v; want none, nil", len(page), err)
	}
}

func testTimes(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Nanoseconds and zones other than UTC go in; UTC truncated to the
	// microsecond comes out, on every engine.
	east := time.FixedZone("UTC+05:30", 5*3600+1800)
	west := time.FixedZone("UTC-07:00", -7*3600)
	queuedAt := time.Date(2031, 2, 3, 4, 5, 6, 123456789, east)
	k := store.SigningKey{
		ID: "kid-1", Purpose: "broker", Generation: 1, Algorithm: "RS256",
		PublicKey: []byte{1}, PrivateKey: []byte{2},
		CreatedAt:      time.Date(2030, 12, 31, 23, 59, 59, 999999999, west),
		SignsFrom:      time.Date(2031, 1, 1, 0, 0, 0, 1, east),
		PublishedUntil: time.Date(2031, 6, 30, 12, 0, 0, 500, west),
	}

	r := mustCreateRun(t, s, store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress, QueuedAt: queuedAt})
	checkTimeRoundTrip(t, "Run.QueuedAt from CreateRun", r.QueuedAt, queuedAt)
	got, err := s.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	checkTimeRoundTrip(t, "Run.QueuedAt from GetRun", got.QueuedAt, queuedAt)

	if err := s.InsertSigningKey(ctx, k); err != nil {
		t.Fatalf("InsertSigningKey: %v", err)
	}
	keys, err := s.SigningKeys(ctx, "broker", k.SignsFrom)
	if err != nil || len(keys) != 1 {
		t.Fatalf("SigningKeys = %d keys, %v; want 1", len(keys), err)
	}
	checkTimeRoundTrip(t, "SigningKey.CreatedAt", keys[0].CreatedAt, k.CreatedAt)
	checkTimeRoundTrip(t, "SigningKey.SignsFrom", keys[0].SignsFrom, k.SignsFrom)
	checkTimeRoundTrip(t, "SigningKey.PublishedUntil", keys[0].PublishedUntil, k.PublishedUntil)

	// Comparisons happen at the same precision: a key published until
	// 12:00:00.000000500 is no longer published at 12:00:00.000000999.
	if keys, err := s.SigningKeys(ctx, "broker", k.PublishedUntil.Add(499)); err != nil || len(keys) != 0 {
		t.Errorf("SigningKeys within PublishedUntil's microsecond = %d keys, %v; want none", len(keys), err)
	}
}

func testSigningKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Now()
	key := func(id, purpose string, gen int64, publishedUntil time.Time) store.SigningKey {
		return store.SigningKey{
			ID: id, Purpose: purpose, Generation: gen, Algorithm: "RS256",
			PublicKey:      []byte("public " + id),
			PrivateKey:     []byte("sealed " + id),
			CreatedAt:      now.Add(-time.Hour),
			SignsFrom:      now.Add(-time.Hour + time.Minute),
			PublishedUntil: publishedUntil,
		}
	}
	retired := key("kid-1", "broker", 1, now.Add(-time.Minute))
	current := key("kid-2", "broker", 2, now.Add(time.Hour))
	next := key("kid-3", "broker", 3, now.Add(2*time.Hour))
	other := key("kid-4", "devoidc", 1, now.Add(time.Hour))
	// Inserted out of generation order: the listing sorts.
	for _, k := range []store.SigningKey{next, retired, other, current} {
		if err := s.InsertSigningKey(ctx, k); err != nil {
			t.Fatalf("InsertSigningKey(%s): %v", k.ID, err)
		}
	}

	if err := s.InsertSigningKey(ctx, key("kid-5", "broker", 2, now.Add(time.Hour))); !errors.Is(err, store.ErrConflict) {
		t.Errorf("InsertSigningKey with a taken generation = %v, want ErrConflict", err)
	}
	if err := s.InsertSigningKey(ctx, key("kid-2", "devoidc", 7, now.Add(time.Hour))); !errors.Is(err, store.ErrConflict) {
		t.Errorf("InsertSigningKey with a taken ID = %v, want ErrConflict", err)
	}

	got, err := s.SigningKeys(ctx, "broker", now)
	if err != nil {
		t.Fatalf("SigningKeys: %v", err)
	}
	if want := []store.SigningKey{stored(current), stored(next)}; !reflect.DeepEqual(got, want) {
		t.Errorf("SigningKeys(broker) =\n%+v\nwant the published keys, oldest generation first:\n%+v", got, want)
	}
	if got, err := s.SigningKeys(ctx, "broker", current.PublishedUntil); err != nil || len(got) != 1 || got[0].ID != next.ID {
		t.Errorf("SigningKeys at kid-2's PublishedUntil = %v, %v; want only kid-3 (published until after now)", keyIDs(got), err)
	}
	if got, err := s.SigningKeys(ctx, "devoidc", now); err != nil || len(got) != 1 || got[0].ID != other.ID {
		t.Errorf("SigningKeys(devoidc) = %v, %v; want [kid-4]", keyIDs(got), err)
	}
	if got, err := s.SigningKeys(ctx, "unknown", now); err != nil || len(got) != 0 {
		t.Errorf("SigningKeys(unknown) = %v, %v; want none", keyIDs(got), err)
	}

	// A reseal replaces the private half only while it is the one read.
	if ok, err := s.ResealSigningKey(ctx, "kid-2", []byte("sealed kid-2"), []byte("resealed kid-2")); err != nil || !ok {
		t.Errorf("ResealSigningKey = %v, %v; want it resealed", ok, err)
	}
	if ok, err := s.ResealSigningKey(ctx, "kid-2", []byte("sealed kid-2"), []byte("again")); err != nil || ok {
		t.Errorf("ResealSigningKey of a private half resealed since = %v, %v; want nothing done", ok, err)
	}
	if ok, err := s.ResealSigningKey(ctx, "kid-none", []byte("x"), []byte("y")); err != nil || ok {
		t.Errorf("ResealSigningKey of an unknown key = %v, %v; want nothing done", ok, err)
	}
	resealed := stored(current)
	resealed.PrivateKey = []byte("resealed kid-2")
	if got, err := s.SigningKeys(ctx, "broker", now); err != nil || len(got) != 2 || !reflect.DeepEqual(got[0], resealed) {
		t.Errorf("after the reseal SigningKeys = %+v, %v; want kid-2 resealed, the rest as it was", got, err)
	}
	for name, args := range map[string][3]string{"no ID": {"", "a", "b"}, "no old half": {"kid-2", "", "b"}, "no new half": {"kid-2", "resealed kid-2", ""}} {
		if _, err := s.ResealSigningKey(ctx, args[0], []byte(args[1]), []byte(args[2])); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ResealSigningKey with %s = %v, want ErrInvalid", name, err)
		}
	}

	unstamped := key("kid-6", "stamp", 1, now.Add(time.Hour))
	unstamped.CreatedAt = time.Time{}
	if err := s.InsertSigningKey(ctx, unstamped); err != nil {
		t.Fatalf("InsertSigningKey without CreatedAt: %v", err)
	}
	if got, err := s.SigningKeys(ctx, "stamp", now); err != nil || len(got) != 1 || got[0].CreatedAt.IsZero() {
		t.Errorf("key inserted without CreatedAt = %+v, %v; want CreatedAt set to now", got, err)
	} else {
		checkStoreTime(t, "SigningKey.CreatedAt", got[0].CreatedAt)
	}

	refused := map[string]func(k *store.SigningKey){
		"no ID":              func(k *store.SigningKey) { k.ID = "" },
		"no purpose":         func(k *store.SigningKey) { k.Purpose = "" },
		"generation 0":       func(k *store.SigningKey) { k.Generation = 0 },
		"no algorithm":       func(k *store.SigningKey) { k.Algorithm = "" },
		"no public key":      func(k *store.SigningKey) { k.PublicKey = nil },
		"no private key":     func(k *store.SigningKey) { k.PrivateKey = nil },
		"no SignsFrom":       func(k *store.SigningKey) { k.SignsFrom = time.Time{} },
		"no PublishedUntil":  func(k *store.SigningKey) { k.PublishedUntil = time.Time{} },
		"year 10000 publish": func(k *store.SigningKey) { k.PublishedUntil = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
	}
	for name, mutate := range refused {
		k := key("kid-bad", "refused", 1, now.Add(time.Hour))
		mutate(&k)
		if err := s.InsertSigningKey(ctx, k); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("InsertSigningKey(%s) = %v, want ErrInvalid", name, err)
		}
	}
}

func testSigningKeyRotationRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Now()
	// Replicas racing to rotate all insert generation 1: one key results.
	oneWins(t, 4, "inserted generation 1", func(i int) error {
		return s.InsertSigningKey(ctx, store.SigningKey{
			ID: fmt.Sprintf("kid-%d", i), Purpose: "broker", Generation: 1, Algorithm: "RS256",
			PublicKey: []byte{1}, PrivateKey: []byte{2},
			SignsFrom: now, PublishedUntil: now.Add(time.Hour),
		})
	})
	if keys, err := s.SigningKeys(ctx, "broker", now); err != nil || len(keys) != 1 {
		t.Errorf("SigningKeys after the race = %v, %v; want one key", keyIDs(keys), err)
	}
}

// mustCreateRun creates r or fails the test.
func mustCreateRun(t *testing.T, s store.Store, r store.Run) store.Run {
	t.Helper()
	out, err := s.CreateRun(t.Context(), r)
	if err != nil {
		t.Fatalf("CreateRun(%s): %v", r.ID, err)
	}
	return out
}

// checkStoreTime fails the test unless t is a time as the store returns
// them: set, in UTC, with no digits below the microsecond.
func checkStoreTime(t *testing.T, name string, tm time.Time) {
	t.Helper()
	if tm.IsZero() || tm.Location() != time.UTC || tm.Nanosecond()%1000 != 0 {
		t.Errorf("%s = %v, want a set time in UTC truncated to the microsecond", name, tm)
	}
}

// checkTimeRoundTrip fails the test unless got is in the form the store
// promises for a time that went in as sent.
func checkTimeRoundTrip(t *testing.T, name string, got, sent time.Time) {
	t.Helper()
	want := sent.UTC().Truncate(time.Microsecond)
	if got != want || got.Location() != time.UTC {
		t.Errorf("%s = %v, want %v (sent %v)", name, got, want, sent)
	}
}

// stored returns k with its times as the store returns them.
func stored(k store.SigningKey) store.SigningKey {
	k.CreatedAt = k.CreatedAt.UTC().Truncate(time.Microsecond)
	k.SignsFrom = k.SignsFrom.UTC().Truncate(time.Microsecond)
	k.PublishedUntil = k.PublishedUntil.UTC().Truncate(time.Microsecond)
	return k
}

// jsonEqual reports whether a and b are the same JSON value; engines may
// normalise whitespace and key order.
func jsonEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func runIDs(runs []store.Run) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return ids
}

func keyIDs(keys []store.SigningKey) []string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return ids
}
