package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testAwaitInput: a call whose round ends asking for input is one
// execution over its rounds. AwaitInputAudited moves the started
// execution to awaiting input and gives back the approval the round used,
// with its record, in one transaction; BeginExecutionAudited of the same call
// starts it again (once, of racers), of another call conflicts; the sweep
// of abandoned executions leaves it alone; and a failed record writes
// nothing.
func testAwaitInput(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	now := f.now
	at := now.Truncate(time.Microsecond)
	var records int
	build := func(kind string) func(store.AuditHead) (store.AuditRecord, error) {
		return func(h store.AuditHead) (store.AuditRecord, error) {
			r, err := chained(store.AuditRecord{At: at, Kind: kind, Tool: "notes_write"})(h)
			records = int(r.Seq)
			return r, err
		}
	}

	// The first round: the approval used with the execution's start.
	b := testBinding()
	a := f.approved("apr-rounds", b)
	in := testExecution("rounds/call-1", now)
	in.ApprovalID = a.ID
	_, _, started, err := s.ConsumeApprovalAudited(ctx, store.ConsumeApprovalParams{ID: a.ID, Binding: b, Now: now.Add(2 * time.Minute), Execution: &in}, build("approval_consumed"))
	if err != nil || !started {
		t.Fatalf("ConsumeApprovalAudited = started %v, %v; want started", started, err)
	}
	e, err := s.AwaitInputAudited(ctx, in.IdempotencyKey, a.ID, now.Add(3*time.Minute), build("input_required"))
	if err != nil || e.Status != store.ExecutionAwaitingInput || e.IdempotencyKey != in.IdempotencyKey {
		t.Fatalf("AwaitInputAudited = %+v, %v; want the execution awaiting input", e, err)
	}
	if got := f.status(a.ID); got != store.ApprovalApproved {
		t.Errorf("after the round that asked for input the approval is %s, want approved (unused)", got)
	}
	if _, err := s.FindApproved(ctx, b, now.Add(4*time.Minute)); err != nil {
		t.Errorf("FindApproved after the round = %v, want the approval", err)
	}
	if got, err := s.GetExecution(ctx, in.IdempotencyKey); err != nil || got.Status != store.ExecutionAwaitingInput || len(got.Result) != 0 {
		t.Errorf("GetExecution = %+v, %v; want it awaiting input without a result", got, err)
	}

	// Not started (awaiting input already), an unknown key, an approval
	// not consumed: refused, nothing written.
	if _, err := s.AwaitInputAudited(ctx, in.IdempotencyKey, "", now, build("input_required")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AwaitInputAudited of an execution awaiting input = %v, want ErrConflict", err)
	}
	if _, err := s.AwaitInputAudited(ctx, "rounds/nobody", "", now, build("input_required")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AwaitInputAudited of no execution = %v, want ErrNotFound", err)
	}
	if _, err := s.AwaitInputAudited(ctx, "", a.ID, now, build("input_required")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AwaitInputAudited of an approval not consumed = %v, want ErrConflict", err)
	}
	if records != 2 {
		t.Errorf("the log has %d records, want 2: refusals record nothing", records)
	}
	checkChain(t, s, 2)

	// The sweep of abandoned executions leaves a call awaiting input.
	if marked, err := s.MarkOutcomeUnknownAudited(ctx, now.Add(time.Hour), nil); err != nil || len(marked) != 0 {
		t.Errorf("MarkOutcomeUnknownAudited = %v, %v; want nothing marked", marked, err)
	}
	// Nor can it be finished while it awaits input.
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: in.IdempotencyKey, Status: store.ExecutionSucceeded, Result: []byte(`{}`), Now: now}, nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("FinishExecutionAudited of an execution awaiting input = %v, want ErrConflict", err)
	}

	// Another call with the key is a conflict; the same call starts it
	// again, with the new round's start and approval, once of racers
	// (each with its record, as every begin has).
	other := testExecution(in.IdempotencyKey, now)
	other.ArgumentsHash = "args-2"
	if _, _, err := s.BeginExecutionAudited(ctx, other, nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("BeginExecutionAudited of another call under the key = %v, want ErrConflict", err)
	}
	const racers = 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	resumed := 0
	second := now.Add(5 * time.Minute)
	for range racers {
		wg.Go(func() {
			again := testExecution(in.IdempotencyKey, second)
			again.ApprovalID = "apr-2"
			got, started, err := s.BeginExecutionAudited(ctx, again, chained(store.AuditRecord{At: at, Kind: "decision", Tool: "notes_write"}))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("BeginExecutionAudited of the next round: %v", err)
				return
			}
			if got.Status != store.ExecutionStarted || !got.StartedAt.Equal(second.Truncate(time.Microsecond)) || got.ApprovalID != "apr-2" {
				t.Errorf("BeginExecutionAudited of the next round = %+v; want it started at the round's start with its approval", got)
			}
			if started {
				resumed++
			}
		})
	}
	wg.Wait()
	if resumed != 1 {
		t.Errorf("%d racers started the next round, want exactly 1", resumed)
	}
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: in.IdempotencyKey, Status: store.ExecutionSucceeded, Result: []byte(`{"done":true}`), Now: second}, nil); err != nil {
		t.Errorf("FinishExecutionAudited of the completing round: %v", err)
	}

	// Without an execution (a call without idempotency key), the
	// approval alone is given back; a failing record gives back nothing.
	b2 := b
	b2.ArgumentsHash = "args-3"
	a2 := f.approved("apr-rounds-2", b2)
	if _, err := consume(ctx, s, a2.ID, b2, now.Add(2*time.Minute)); err != nil {
		t.Fatalf("ConsumeApprovalAudited: %v", err)
	}
	errBuild := errors.New("hashing failed")
	if _, err := s.AwaitInputAudited(ctx, "", a2.ID, now.Add(3*time.Minute), func(store.AuditHead) (store.AuditRecord, error) {
		return store.AuditRecord{}, errBuild
	}); !errors.Is(err, errBuild) {
		t.Errorf("AwaitInputAudited with a failing record = %v, want its error", err)
	}
	if got := f.status(a2.ID); got != store.ApprovalConsumed {
		t.Errorf("after a failed record the approval is %s, want consumed", got)
	}
	if _, err := s.AwaitInputAudited(ctx, "", a2.ID, now.Add(3*time.Minute), build("input_required")); err != nil {
		t.Errorf("AwaitInputAudited of an approval alone: %v", err)
	}
	if got := f.status(a2.ID); got != store.ApprovalApproved {
		t.Errorf("the approval is %s, want approved again", got)
	}
	checkChain(t, s, 3+racers)
}

// testEndAwaitingInput: the executions awaiting input since before the
// cut are ended failed, with the result given and finished at the sweep's
// time, each with its record, in one transaction; the others (awaiting
// input since later, started, finished) are left alone; a failed record
// ends none; a result is required; a retry of an ended call finds it
// ended, not started again.
func testEndAwaitingInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	for key, startedAt := range map[string]time.Time{
		"waiting-1": now.Add(-30 * time.Minute), "waiting-2": now.Add(-20 * time.Minute), "waiting-new": now.Add(-time.Minute),
		"started-old": now.Add(-40 * time.Minute), "finished-old": now.Add(-40 * time.Minute),
	} {
		if _, _, err := s.BeginExecutionAudited(ctx, testExecution(key, startedAt), nil); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(key, "waiting") {
			if _, err := s.AwaitInputAudited(ctx, key, "", startedAt.Add(time.Second), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "finished-old", Status: store.ExecutionSucceeded, Result: []byte(`{}`), Now: now.Add(-39 * time.Minute)}, nil); err != nil {
		t.Fatal(err)
	}
	cut := now.Add(-10 * time.Minute)
	result := json.RawMessage(`{"content":[{"type":"text","text":"no answer came"}],"isError":true}`)
	errBuild := errors.New("hashing failed")
	build := func(failOn string) func(store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
		return func(e store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
			if e.IdempotencyKey == failOn {
				return func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errBuild }
			}
			return chained(store.AuditRecord{At: now, Kind: "input_expired", Tool: e.Tool, Details: []byte(`{"key":"` + e.IdempotencyKey + `"}`)})
		}
	}
	status := func(key string) store.Execution {
		t.Helper()
		e, err := s.GetExecution(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	for name, r := range map[string]json.RawMessage{"no result": nil, "a result that is not JSON": []byte(`{"content":`)} {
		if ended, err := s.EndAwaitingInputAudited(ctx, cut, now, r, build("")); !errors.Is(err, store.ErrInvalid) || len(ended) != 0 {
			t.Errorf("EndAwaitingInputAudited with %s = %v, %v; want ErrInvalid", name, ended, err)
		}
	}
	if ended, err := s.EndAwaitingInputAudited(ctx, cut, now, result, build("waiting-2")); err != errBuild || len(ended) != 0 {
		t.Errorf("EndAwaitingInputAudited with a failing build = %v, %v; want none and its error as is", ended, err)
	}
	for _, key := range []string{"waiting-1", "waiting-2"} {
		if e := status(key); e.Status != store.ExecutionAwaitingInput {
			t.Errorf("after a failed end %s is %s, want awaiting_input", key, e.Status)
		}
	}
	checkChain(t, s, 0)

	ended, err := s.EndAwaitingInputAudited(ctx, cut, now, result, build(""))
	var keys []string
	for _, e := range ended {
		keys = append(keys, e.IdempotencyKey)
	}
	if err != nil || !slices.Equal(keys, []string{"waiting-1", "waiting-2"}) {
		t.Fatalf("EndAwaitingInputAudited = %v, %v; want [waiting-1 waiting-2], oldest first", keys, err)
	}
	checkChain(t, s, 2)
	for _, key := range keys {
		e := status(key)
		if e.Status != store.ExecutionFailed || !e.FinishedAt.Equal(now) || !jsonEqual(e.Result, result) {
			t.Errorf("%s = %s, finished %v, result %s; want failed at %v with the result", key, e.Status, e.FinishedAt, e.Result, now)
		}
	}
	for key, want := range map[string]store.ExecutionStatus{
		"waiting-new": store.ExecutionAwaitingInput, "started-old": store.ExecutionStarted, "finished-old": store.ExecutionSucceeded,
	} {
		if e := status(key); e.Status != want {
			t.Errorf("%s is %s, want %s", key, e.Status, want)
		}
	}
	// A retry of the call finds it ended; the sweep again ends nothing.
	if got, started, err := s.BeginExecutionAudited(ctx, testExecution("waiting-1", now), nil); err != nil || started || got.Status != store.ExecutionFailed {
		t.Errorf("BeginExecutionAudited of an ended call = %s, started %v, %v; want it failed, not started", got.Status, started, err)
	}
	if ended, err := s.EndAwaitingInputAudited(ctx, cut, now, result, build("")); err != nil || len(ended) != 0 {
		t.Errorf("EndAwaitingInputAudited again = %v, %v; want none", ended, err)
	}
	checkChain(t, s, 2)

	// A retry that resumes the call races the sweep: one of them wins,
	// never both.
	for i := range 10 {
		key := fmt.Sprintf("racing-%d", i)
		started := now.Add(-time.Hour)
		if _, _, err := s.BeginExecutionAudited(ctx, testExecution(key, started), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AwaitInputAudited(ctx, key, "", started.Add(time.Second), nil); err != nil {
			t.Fatal(err)
		}
		var resumed bool
		var ended []store.Execution
		var wg sync.WaitGroup
		wg.Go(func() {
			var err error
			if _, resumed, err = s.BeginExecutionAudited(ctx, testExecution(key, now), nil); err != nil {
				t.Errorf("BeginExecutionAudited racing the sweep: %v", err)
			}
		})
		wg.Go(func() {
			var err error
			if ended, err = s.EndAwaitingInputAudited(ctx, cut, now, result, nil); err != nil {
				t.Errorf("EndAwaitingInputAudited racing a retry: %v", err)
			}
		})
		wg.Wait()
		want := store.ExecutionFailed
		if resumed {
			want = store.ExecutionStarted
		}
		if resumed == (len(ended) == 1) || status(key).Status != want {
			t.Errorf("race %d: resumed %v, ended %d, status %s; want exactly one of them to win", i, resumed, len(ended), status(key).Status)
		}
	}
}
