package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testExecution is the execution most tests begin.
func testExecution(key string, startedAt time.Time) store.Execution {
	return store.Execution{
		IdempotencyKey: key,
		Principal:      "issuer|tenant|alice",
		Tool:           "notes_write",
		ArgumentsHash:  "args-1",
		ApprovalID:     "apr-1",
		RunID:          "run-1",
		StartedAt:      startedAt,
	}
}

func testBeginExecution(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Date(2031, 3, 4, 5, 6, 7, 891011121, time.UTC)
	in := testExecution("run-1/call-1", now)

	e, started, err := s.BeginExecutionAudited(ctx, in, nil)
	if err != nil || !started {
		t.Fatalf("BeginExecutionAudited = started %v, %v; want started", started, err)
	}
	want := in
	want.Status = store.ExecutionStarted
	want.StartedAt = now.Truncate(time.Microsecond)
	if !reflect.DeepEqual(e, want) {
		t.Errorf("BeginExecutionAudited returned\n%+v\nwant\n%+v", e, want)
	}

	// The same call again finds it and does not start it.
	again, started, err := s.BeginExecutionAudited(ctx, testExecution("run-1/call-1", now.Add(time.Second)), nil)
	if err != nil || started || !reflect.DeepEqual(again, e) {
		t.Errorf("BeginExecutionAudited again = %+v, started %v, %v; want the first record, not started", again, started, err)
	}

	// A key reused for another call is a conflict, never its result.
	reuses := []struct {
		name   string
		change func(e *store.Execution)
	}{
		{"other principal", func(e *store.Execution) { e.Principal = "issuer|tenant|mallory" }},
		{"other tool", func(e *store.Execution) { e.Tool = "notes_delete" }},
		{"other arguments", func(e *store.Execution) { e.ArgumentsHash = "args-2" }},
	}
	for _, tt := range reuses {
		other := testExecution("run-1/call-1", now)
		tt.change(&other)
		if _, _, err := s.BeginExecutionAudited(ctx, other, nil); !errors.Is(err, store.ErrConflict) {
			t.Errorf("BeginExecutionAudited with the key of another call (%s) = %v, want ErrConflict", tt.name, err)
		}
	}

	result := json.RawMessage(`{"content": [{"type":"text", "text":"saved"}]}`)
	done, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: e.IdempotencyKey, Status: store.ExecutionSucceeded, Result: result, Now: now.Add(time.Second)}, nil)
	if err != nil {
		t.Fatalf("FinishExecutionAudited: %v", err)
	}
	want.Status = store.ExecutionSucceeded
	want.Result = result
	want.FinishedAt = now.Add(time.Second).Truncate(time.Microsecond)
	if !reflect.DeepEqual(done, want) {
		t.Errorf("FinishExecutionAudited returned\n%+v\nwant\n%+v", done, want)
	}
	if got, err := s.GetExecution(ctx, e.IdempotencyKey); err != nil || !reflect.DeepEqual(got, done) {
		t.Errorf("GetExecution = %+v, %v; want %+v", got, err, done)
	}
	// A retry after the end gets the result, and runs nothing.
	if got, started, err := s.BeginExecutionAudited(ctx, in, nil); err != nil || started || !reflect.DeepEqual(got, done) {
		t.Errorf("BeginExecutionAudited after the end = %+v, started %v, %v; want the finished record", got, started, err)
	}
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: e.IdempotencyKey, Status: store.ExecutionFailed, Now: now}, nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("FinishExecutionAudited of a finished execution = %v, want ErrConflict", err)
	}
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "missing", Status: store.ExecutionFailed, Now: now}, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FinishExecution(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.GetExecution(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetExecution(missing) = %v, want ErrNotFound", err)
	}

	// Without a result, approval or run.
	bare := store.Execution{IdempotencyKey: "client/key-1", Principal: "p", Tool: "t", ArgumentsHash: "h"}
	b, started, err := s.BeginExecutionAudited(ctx, bare, nil)
	if err != nil || !started || b.ApprovalID != "" || b.RunID != "" {
		t.Fatalf("BeginExecution(bare) = %+v, started %v, %v", b, started, err)
	}
	checkStoreTime(t, "StartedAt set by the store", b.StartedAt)
	if f, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: bare.IdempotencyKey, Status: store.ExecutionFailed, Now: now}, nil); err != nil || f.Result != nil || f.Status != store.ExecutionFailed {
		t.Errorf("FinishExecutionAudited without a result = %+v, %v; want failed with a nil result", f, err)
	}

	invalidBegin := []struct {
		name   string
		change func(e *store.Execution)
	}{
		{"no key", func(e *store.Execution) { e.IdempotencyKey = "" }},
		{"no principal", func(e *store.Execution) { e.Principal = "" }},
		{"no tool", func(e *store.Execution) { e.Tool = "" }},
		{"no arguments hash", func(e *store.Execution) { e.ArgumentsHash = "" }},
		{"already finished", func(e *store.Execution) { e.Status = store.ExecutionSucceeded }},
		{"with a result", func(e *store.Execution) { e.Result = json.RawMessage(`{}`) }},
		{"NUL in the key", func(e *store.Execution) { e.IdempotencyKey = "k\x00" }},
	}
	for i, tt := range invalidBegin {
		e := testExecution(fmt.Sprintf("invalid-%d", i), now)
		tt.change(&e)
		if _, _, err := s.BeginExecutionAudited(ctx, e, nil); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("BeginExecutionAudited %s = %v, want ErrInvalid", tt.name, err)
		}
	}
	if _, _, err := s.BeginExecutionAudited(ctx, testExecution("open", now), nil); err != nil {
		t.Fatal(err)
	}
	invalidFinish := []struct {
		name   string
		status store.ExecutionStatus
		result json.RawMessage
		at     time.Time
	}{
		{"to started", store.ExecutionStarted, nil, now},
		{"to outcome unknown with a result", store.ExecutionOutcomeUnknown, json.RawMessage(`{}`), now},
		{"result not JSON", store.ExecutionSucceeded, json.RawMessage(`{`), now},
		{"no time", store.ExecutionSucceeded, nil, time.Time{}},
	}
	for _, tt := range invalidFinish {
		if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "open", Status: tt.status, Result: tt.result, Now: tt.at}, nil); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("FinishExecutionAudited %s = %v, want ErrInvalid", tt.name, err)
		}
	}

	// A process that cannot record how its call ended says so: the
	// execution is outcome_unknown at once, with the time it gave up, and
	// is never run again.
	lost := testExecution("lost", now)
	if _, _, err := s.BeginExecutionAudited(ctx, lost, nil); err != nil {
		t.Fatal(err)
	}
	marked, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "lost", Status: store.ExecutionOutcomeUnknown, Now: now.Add(time.Second)}, nil)
	if err != nil || marked.Status != store.ExecutionOutcomeUnknown || marked.Result != nil || !marked.FinishedAt.Equal(now.Add(time.Second).Truncate(time.Microsecond)) {
		t.Errorf("FinishExecutionAudited to outcome_unknown = %+v, %v; want outcome_unknown, no result, finished then", marked, err)
	}
	if got, started, err := s.BeginExecutionAudited(ctx, lost, nil); err != nil || started || got.Status != store.ExecutionOutcomeUnknown {
		t.Errorf("BeginExecutionAudited after outcome_unknown = %s, started %v, %v; want outcome_unknown, not started", got.Status, started, err)
	}
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "lost", Status: store.ExecutionSucceeded, Now: now}, nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("FinishExecutionAudited after outcome_unknown = %v, want ErrConflict", err)
	}

	// The same with an audit record, on this store.
	t.Run("Audited", func(t *testing.T) { testExecutionsAudited(t, s) })
}

// testExecutionsAudited runs on the store of testBeginExecution, whose
// audit log is empty.
func testExecutionsAudited(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Date(2031, 3, 4, 5, 6, 7, 891011121, time.UTC)
	at := now.Truncate(time.Microsecond)
	logLength := func() int {
		t.Helper()
		records, err := s.AuditRecords(ctx, 0, 100)
		if err != nil {
			t.Fatalf("AuditRecords: %v", err)
		}
		return len(records)
	}
	var heads []store.AuditHead
	build := func(kind string) func(store.AuditHead) (store.AuditRecord, error) {
		return func(h store.AuditHead) (store.AuditRecord, error) {
			heads = append(heads, h)
			return chained(store.AuditRecord{At: at, Kind: kind, Tool: "notes_write"})(h)
		}
	}

	in := testExecution("audited/call-1", now)
	e, started, err := s.BeginExecutionAudited(ctx, in, build("decision"))
	if err != nil || !started {
		t.Fatalf("BeginExecutionAudited = started %v, %v; want started", started, err)
	}
	want := in
	want.Status = store.ExecutionStarted
	want.StartedAt = at
	if !reflect.DeepEqual(e, want) {
		t.Errorf("BeginExecutionAudited returned\n%+v\nwant\n%+v", e, want)
	}
	if got, err := s.GetExecution(ctx, in.IdempotencyKey); err != nil || !reflect.DeepEqual(got, e) {
		t.Errorf("GetExecution = %+v, %v; want %+v", got, err, e)
	}
	if len(heads) != 1 || heads[0] != (store.AuditHead{}) || logLength() != 1 {
		t.Errorf("build saw heads %v and the log has %d records; want one call on the empty head, one record", heads, logLength())
	}

	// The same call again finds it, and its record is appended all the
	// same: the decision it records stands.
	again, started, err := s.BeginExecutionAudited(ctx, testExecution("audited/call-1", now.Add(time.Second)), build("decision"))
	if err != nil || started || !reflect.DeepEqual(again, e) {
		t.Errorf("BeginExecutionAudited again = %+v, started %v, %v; want the first record, not started", again, started, err)
	}
	if n := logLength(); n != 2 {
		t.Errorf("the log has %d records, want 2", n)
	}

	// A key of another call: its execution is untouched, and the record
	// is appended all the same.
	other := testExecution("audited/call-1", now)
	other.ArgumentsHash = "args-2"
	if _, _, err := s.BeginExecutionAudited(ctx, other, build("decision")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("BeginExecutionAudited with the key of another call = %v, want ErrConflict", err)
	}
	if got, err := s.GetExecution(ctx, in.IdempotencyKey); err != nil || !reflect.DeepEqual(got, e) {
		t.Errorf("after a conflicting begin GetExecution = %+v, %v; want %+v", got, err, e)
	}
	if n := logLength(); n != 3 {
		t.Errorf("after a conflicting begin the log has %d records, want 3", n)
	}

	// What fails writes neither the execution nor the record.
	errBuild := errors.New("hashing failed")
	failing := func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errBuild }
	if _, _, err := s.BeginExecutionAudited(ctx, testExecution("audited/call-2", now), failing); err != errBuild {
		t.Errorf("BeginExecutionAudited with a failing build = %v, want its error as is", err)
	}
	misbuilt := func(h store.AuditHead) (store.AuditRecord, error) {
		r, err := chained(store.AuditRecord{At: at, Kind: "decision"})(h)
		r.PrevHash = "forged"
		return r, err
	}
	if _, _, err := s.BeginExecutionAudited(ctx, testExecution("audited/call-2", now), misbuilt); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("BeginExecutionAudited with a record off the chain = %v, want ErrInvalid", err)
	}
	invalid := testExecution("audited/call-2", now)
	invalid.Principal = ""
	if _, _, err := s.BeginExecutionAudited(ctx, invalid, build("decision")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("BeginExecutionAudited without a principal = %v, want ErrInvalid", err)
	}
	if _, err := s.GetExecution(ctx, "audited/call-2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after failed begins GetExecution = %v, want ErrNotFound: nothing started", err)
	}
	if n := logLength(); n != 3 {
		t.Errorf("after failed begins the log has %d records, want 3", n)
	}

	result := json.RawMessage(`{"content":[]}`)
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: in.IdempotencyKey, Status: store.ExecutionSucceeded, Result: result, Now: now}, failing); err != errBuild {
		t.Errorf("FinishExecutionAudited with a failing build = %v, want its error as is", err)
	}
	if got, err := s.GetExecution(ctx, in.IdempotencyKey); err != nil || got.Status != store.ExecutionStarted {
		t.Errorf("after a failed finish the execution is %s, %v; want still started", got.Status, err)
	}
	done, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: in.IdempotencyKey, Status: store.ExecutionSucceeded, Result: result, Now: now.Add(time.Second)}, build("executed"))
	if err != nil {
		t.Fatalf("FinishExecutionAudited: %v", err)
	}
	want.Status, want.Result, want.FinishedAt = store.ExecutionSucceeded, result, at.Add(time.Second)
	if !reflect.DeepEqual(done, want) {
		t.Errorf("FinishExecutionAudited returned\n%+v\nwant\n%+v", done, want)
	}
	records, err := s.AuditRecords(ctx, 0, 100)
	if err != nil || len(records) != 4 || records[3].Kind != "executed" || records[3].PrevHash != records[2].Hash {
		t.Fatalf("after the finish the log is %+v, %v; want 4 records, the last the execution's, chained", records, err)
	}
	if n := logLength(); n != 4 {
		t.Errorf("after a finish the log has %d records, want 4", n)
	}
	// A finish that finds nothing started records what happened all the
	// same; one the store refuses records nothing.
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: in.IdempotencyKey, Status: store.ExecutionFailed, Now: now}, build("executed")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("FinishExecutionAudited of a finished execution = %v, want ErrConflict", err)
	}
	if got, err := s.GetExecution(ctx, in.IdempotencyKey); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("after a second finish GetExecution = %+v, %v; want the first finish, %+v", got, err, want)
	}
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "audited/missing", Status: store.ExecutionFailed, Now: now}, build("executed")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FinishExecutionAudited(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: in.IdempotencyKey, Status: store.ExecutionStarted, Now: now}, build("executed")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("FinishExecutionAudited to started = %v, want ErrInvalid", err)
	}
	if n := logLength(); n != 6 {
		t.Errorf("after the refused finishes the log has %d records, want 6", n)
	}
	checkChain(t, s, 6)
}

func testBeginExecutionRace(t *testing.T, s store.Store) {
	const racers = 8
	start := make(chan struct{})
	started := make([]bool, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			_, started[i], errs[i] = s.BeginExecutionAudited(t.Context(), testExecution("run-1/call-1", time.Now()), nil)
		})
	}
	close(start)
	wg.Wait()
	n := 0
	for i := range racers {
		if errs[i] != nil {
			t.Errorf("racer %d: %v", i, errs[i])
		}
		if started[i] {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d racers started the execution, want exactly 1", n)
	}
}

func testMarkOutcomeUnknown(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	begin := func(key string, startedAt time.Time) {
		if _, _, err := s.BeginExecutionAudited(ctx, testExecution(key, startedAt), nil); err != nil {
			t.Fatal(err)
		}
	}
	begin("abandoned-2", now.Add(-2*time.Minute))
	begin("abandoned-1", now.Add(-3*time.Minute))
	begin("finished", now.Add(-4*time.Minute))
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "finished", Status: store.ExecutionSucceeded, Now: now.Add(-time.Minute)}, nil); err != nil {
		t.Fatal(err)
	}
	begin("running", now)

	marked, err := s.MarkOutcomeUnknownAudited(ctx, now, nil)
	if err != nil {
		t.Fatalf("MarkOutcomeUnknownAudited: %v", err)
	}
	var keys []string
	for _, e := range marked {
		keys = append(keys, e.IdempotencyKey)
		if e.Status != store.ExecutionOutcomeUnknown || !e.FinishedAt.IsZero() {
			t.Errorf("marked %+v, want outcome_unknown with no finish time", e)
		}
	}
	if !reflect.DeepEqual(keys, []string{"abandoned-1", "abandoned-2"}) {
		t.Errorf("MarkOutcomeUnknownAudited marked %v, want [abandoned-1 abandoned-2], oldest first", keys)
	}
	for key, want := range map[string]store.ExecutionStatus{
		"abandoned-1": store.ExecutionOutcomeUnknown,
		"finished":    store.ExecutionSucceeded,
		"running":     store.ExecutionStarted,
	} {
		if e, err := s.GetExecution(ctx, key); err != nil || e.Status != want {
			t.Errorf("%s is %s, %v; want %s", key, e.Status, err, want)
		}
	}
	// The late end of an abandoned execution does not overwrite the mark,
	// and a retry finds the mark rather than running again.
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "abandoned-1", Status: store.ExecutionSucceeded, Now: now}, nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("FinishExecutionAudited after the mark = %v, want ErrConflict", err)
	}
	if e, started, err := s.BeginExecutionAudited(ctx, testExecution("abandoned-1", now), nil); err != nil || started || e.Status != store.ExecutionOutcomeUnknown {
		t.Errorf("BeginExecutionAudited after the mark = %s, started %v, %v; want outcome_unknown, not started", e.Status, started, err)
	}
	if marked, err := s.MarkOutcomeUnknownAudited(ctx, now, nil); err != nil || len(marked) != 0 {
		t.Errorf("MarkOutcomeUnknownAudited again = %d, %v; want none", len(marked), err)
	}
}

// testMarkOutcomeUnknownAudited checks that the executions marked
// outcome_unknown are written with a record each, oldest first, or none
// at all, and that an ended execution is neither marked nor recorded.
func testMarkOutcomeUnknownAudited(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	for key, startedAt := range map[string]time.Time{
		"abandoned-1": now.Add(-3 * time.Minute), "abandoned-2": now.Add(-2 * time.Minute),
		"finished": now.Add(-4 * time.Minute), "running": now,
	} {
		if _, _, err := s.BeginExecutionAudited(ctx, testExecution(key, startedAt), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.FinishExecutionAudited(ctx, store.FinishExecutionParams{IdempotencyKey: "finished", Status: store.ExecutionSucceeded, Now: now.Add(-time.Minute)}, nil); err != nil {
		t.Fatal(err)
	}
	errBuild := errors.New("hashing failed")
	build := func(failOn string) func(store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
		return func(e store.Execution) func(store.AuditHead) (store.AuditRecord, error) {
			if e.IdempotencyKey == failOn {
				return func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errBuild }
			}
			return chained(store.AuditRecord{At: now, Kind: "outcome_unknown", Tool: e.Tool, Details: []byte(`{"key":"` + e.IdempotencyKey + `"}`)})
		}
	}
	records := func() []string {
		t.Helper()
		rs, err := s.AuditRecords(ctx, 0, 100)
		if err != nil {
			t.Fatalf("AuditRecords: %v", err)
		}
		var keys []string
		for _, r := range rs {
			var d struct{ Key string }
			if err := json.Unmarshal(r.Details, &d); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, d.Key)
		}
		return keys
	}
	status := func(key string) store.ExecutionStatus {
		t.Helper()
		e, err := s.GetExecution(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return e.Status
	}

	// The second record fails: the first execution's mark and record
	// are not written either.
	if marked, err := s.MarkOutcomeUnknownAudited(ctx, now, build("abandoned-2")); err != errBuild || len(marked) != 0 {
		t.Errorf("MarkOutcomeUnknownAudited with a failing build = %d, %v; want none and its error as is", len(marked), err)
	}
	for _, key := range []string{"abandoned-1", "abandoned-2"} {
		if st := status(key); st != store.ExecutionStarted {
			t.Errorf("after a failed audited mark %s is %s, want started", key, st)
		}
	}
	if got := records(); len(got) != 0 {
		t.Errorf("after a failed audited mark the log holds %v", got)
	}

	marked, err := s.MarkOutcomeUnknownAudited(ctx, now, build(""))
	var keys []string
	for _, e := range marked {
		keys = append(keys, e.IdempotencyKey)
	}
	want := []string{"abandoned-1", "abandoned-2"}
	if err != nil || !reflect.DeepEqual(keys, want) {
		t.Fatalf("MarkOutcomeUnknownAudited = %v, %v; want %v", keys, err, want)
	}
	if got := records(); !reflect.DeepEqual(got, want) {
		t.Errorf("after an audited mark the log holds records of %v, want %v", got, want)
	}
	for key, want := range map[string]store.ExecutionStatus{
		"abandoned-1": store.ExecutionOutcomeUnknown, "abandoned-2": store.ExecutionOutcomeUnknown,
		"finished": store.ExecutionSucceeded, "running": store.ExecutionStarted,
	} {
		if st := status(key); st != want {
			t.Errorf("%s is %s, want %s", key, st, want)
		}
	}
	if marked, err := s.MarkOutcomeUnknownAudited(ctx, now, build("")); err != nil || len(marked) != 0 {
		t.Errorf("MarkOutcomeUnknownAudited again = %d, %v; want none", len(marked), err)
	}
	if got := records(); len(got) != 2 {
		t.Errorf("after marking none the log holds %v, want 2 records", got)
	}
}
