package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// chainHash is a stand-in for the audit log's hash: the store computes
// none, it only keeps what its caller computed.
func chainHash(prev string, seq int64, kind string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%s", prev, seq, kind))
	return hex.EncodeToString(sum[:])
}

// chained returns a build function that chains r to the head.
func chained(r store.AuditRecord) func(store.AuditHead) (store.AuditRecord, error) {
	return func(head store.AuditHead) (store.AuditRecord, error) {
		r.Seq = head.Seq + 1
		r.PrevHash = head.Hash
		r.Hash = chainHash(head.Hash, r.Seq, r.Kind)
		return r, nil
	}
}

func testAppendAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	at := time.Date(2031, 3, 4, 5, 6, 7, 891011000, time.UTC)
	full := store.AuditRecord{
		At: at, Kind: "executed", Principal: "issuer|tenant|alice", ClientID: "usher-assistant",
		TokenJTI: "jti-1", Tool: "notes_write", DefinitionHash: "def-1", ArgumentsHash: "args-1",
		Decision: "approve", PolicyIDs: []string{"p1", "p2"}, PolicyHash: "policy-1",
		ApprovalID: "apr-1", RunID: "run-1", Outcome: "succeeded", Latency: 1234 * time.Microsecond,
		Details: json.RawMessage(`{ "b": 1,  "a": ["x", 2.50] }`),
	}
	var heads []store.AuditHead
	first, err := s.AppendAudit(ctx, func(head store.AuditHead) (store.AuditRecord, error) {
		heads = append(heads, head)
		return chained(full)(head)
	})
	if err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	if len(heads) != 1 || heads[0] != (store.AuditHead{}) {
		t.Errorf("build saw heads %v, want one call with the empty head", heads)
	}
	want := full
	want.Seq, want.PrevHash, want.Hash = 1, "", chainHash("", 1, "executed")
	if !reflect.DeepEqual(first, want) {
		t.Errorf("AppendAudit returned\n%+v\nwant\n%+v", first, want)
	}

	second, err := s.AppendAudit(ctx, chained(store.AuditRecord{At: at.In(time.FixedZone("UTC+1", 3600)), Kind: "auth_failed"}))
	if err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	if second.Seq != 2 || second.PrevHash != first.Hash || string(second.Details) != "{}" || second.PolicyIDs != nil {
		t.Errorf("second record %+v, want seq 2 chained to the first, details {}, no policy ids", second)
	}

	records, err := s.AuditRecords(ctx, 0, 10)
	if err != nil {
		t.Fatalf("AuditRecords: %v", err)
	}
	if len(records) != 2 || !reflect.DeepEqual(records[0], first) || !reflect.DeepEqual(records[1], second) {
		t.Fatalf("AuditRecords =\n%+v\nwant\n%+v", records, []store.AuditRecord{first, second})
	}
	// Hashes cover the details as stored: they come back byte for byte.
	if string(records[0].Details) != string(full.Details) {
		t.Errorf("Details = %s, want %s byte for byte", records[0].Details, full.Details)
	}
	if page, err := s.AuditRecords(ctx, 1, 1); err != nil || len(page) != 1 || page[0].Seq != 2 {
		t.Errorf("AuditRecords(after 1, limit 1) = %+v, %v; want seq 2", page, err)
	}
	if page, err := s.AuditRecords(ctx, 2, 10); err != nil || len(page) != 0 {
		t.Errorf("AuditRecords after the head = %+v, %v; want none", page, err)
	}
	if _, err := s.AuditRecords(ctx, 0, 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AuditRecords(limit 0) = %v, want ErrInvalid", err)
	}

	// What build gets wrong is refused, and nothing is written.
	ok := store.AuditRecord{At: at, Kind: "decision"}
	refused := []struct {
		name  string
		build func(store.AuditHead) (store.AuditRecord, error)
		want  error
	}{
		{"seq not the next", func(h store.AuditHead) (store.AuditRecord, error) {
			r, _ := chained(ok)(h)
			r.Seq++
			return r, nil
		}, store.ErrInvalid},
		{"seq of the head", func(h store.AuditHead) (store.AuditRecord, error) {
			r, _ := chained(ok)(h)
			r.Seq = h.Seq
			return r, nil
		}, store.ErrInvalid},
		{"prev hash not the head's", func(h store.AuditHead) (store.AuditRecord, error) {
			r, _ := chained(ok)(h)
			r.PrevHash = "forged"
			return r, nil
		}, store.ErrInvalid},
		{"no hash", func(h store.AuditHead) (store.AuditRecord, error) {
			r, _ := chained(ok)(h)
			r.Hash = ""
			return r, nil
		}, store.ErrInvalid},
		{"a hash already in the log", func(h store.AuditHead) (store.AuditRecord, error) {
			r, _ := chained(ok)(h)
			r.Hash = first.Hash
			return r, nil
		}, store.ErrConflict},
		{"no kind", chained(store.AuditRecord{At: at}), store.ErrInvalid},
		{"no time", chained(store.AuditRecord{Kind: "decision"}), store.ErrInvalid},
		{"time below the microsecond", chained(store.AuditRecord{At: at.Add(1), Kind: "decision"}), store.ErrInvalid},
		{"negative latency", chained(store.AuditRecord{At: at, Kind: "decision", Latency: -time.Microsecond}), store.ErrInvalid},
		{"latency below the microsecond", chained(store.AuditRecord{At: at, Kind: "decision", Latency: 1500}), store.ErrInvalid},
		{"details not JSON", chained(store.AuditRecord{At: at, Kind: "decision", Details: json.RawMessage(`{`)}), store.ErrInvalid},
		{"empty policy id", chained(store.AuditRecord{At: at, Kind: "decision", PolicyIDs: []string{""}}), store.ErrInvalid},
		{"NUL in the principal", chained(store.AuditRecord{At: at, Kind: "decision", Principal: "a\x00"}), store.ErrInvalid},
	}
	for _, tt := range refused {
		if _, err := s.AppendAudit(ctx, tt.build); !errors.Is(err, tt.want) {
			t.Errorf("AppendAudit %s = %v, want %v", tt.name, err, tt.want)
		}
	}
	errBuild := errors.New("hashing failed")
	if _, err := s.AppendAudit(ctx, func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errBuild }); err != errBuild {
		t.Errorf("AppendAudit with a failing build = %v, want its error as is", err)
	}
	if records, err := s.AuditRecords(ctx, 0, 10); err != nil || len(records) != 2 {
		t.Errorf("after refused appends the log has %d records, %v; want 2", len(records), err)
	}
	third, err := s.AppendAudit(ctx, chained(ok))
	if err != nil || third.Seq != 3 || third.PrevHash != second.Hash {
		t.Errorf("AppendAudit after refusals = %+v, %v; want seq 3 chained to seq 2", third, err)
	}
}

func testAppendAuditConcurrent(t *testing.T, s store.Store) {
	const appenders, each = 8, 5
	start := make(chan struct{})
	errs := make([]error, appenders)
	var wg sync.WaitGroup
	for i := range appenders {
		wg.Go(func() {
			<-start
			for j := range each {
				_, err := s.AppendAudit(t.Context(), chained(store.AuditRecord{
					At: time.Now().Truncate(time.Microsecond), Kind: fmt.Sprintf("k%d-%d", i, j),
				}))
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("appender %d: %v", i, err)
		}
	}
	checkChain(t, s, appenders*each)

	// Appends that begin and finish executions chain with the others: of
	// the racers on one key, one starts it and one finishes it, and each
	// begin and finish appended one record.
	t.Run("WithExecutions", func(t *testing.T) {
		const keys = 4
		start := make(chan struct{})
		var mu sync.Mutex
		appended := appenders * each
		starts, finishes := map[string]int{}, map[string]int{}
		errs := make([]error, appenders)
		var wg sync.WaitGroup
		for i := range appenders {
			wg.Go(func() {
				<-start
				for k := range keys {
					key := fmt.Sprintf("concurrent-%d", k)
					r := store.AuditRecord{At: time.Now().Truncate(time.Microsecond), Kind: fmt.Sprintf("begin%d_%d", i, k)}
					_, started, err := s.BeginExecutionAudited(t.Context(), testExecution(key, time.Now()), chained(r))
					if err != nil {
						errs[i] = fmt.Errorf("BeginExecutionAudited: %w", err)
						return
					}
					r.Kind = fmt.Sprintf("finish%d_%d", i, k)
					_, err = s.FinishExecutionAudited(t.Context(), store.FinishExecutionParams{IdempotencyKey: key, Status: store.ExecutionSucceeded, Now: time.Now()}, chained(r))
					finished := err == nil
					if err != nil && !errors.Is(err, store.ErrConflict) {
						errs[i] = fmt.Errorf("FinishExecutionAudited: %w", err)
						return
					}
					mu.Lock()
					appended += 2 // a finish that finds nothing started records all the same
					if started {
						starts[key]++
					}
					if finished {
						finishes[key]++
					}
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("appender %d: %v", i, err)
			}
		}
		for k := range keys {
			key := fmt.Sprintf("concurrent-%d", k)
			if starts[key] != 1 || finishes[key] != 1 {
				t.Errorf("%s was started %d and finished %d times, want once each", key, starts[key], finishes[key])
			}
		}
		checkChain(t, s, appended)
	})
}

// checkChain reads the whole log and checks that it holds n records, each
// chained to the one before with the hash its build computed.
func checkChain(t *testing.T, s store.Store, n int) {
	t.Helper()
	// Read in pages smaller than the log, as a verifier would.
	var all []store.AuditRecord
	for after := int64(0); ; {
		page, err := s.AuditRecords(t.Context(), after, 7)
		if err != nil {
			t.Fatalf("AuditRecords: %v", err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1].Seq
	}
	if len(all) != n {
		t.Fatalf("the log has %d records, want %d", len(all), n)
	}
	prev := ""
	for i, r := range all {
		if r.Seq != int64(i+1) {
			t.Errorf("record %d has seq %d, want %d: the chain has a gap", i, r.Seq, i+1)
		}
		if r.PrevHash != prev {
			t.Errorf("record %d has prev hash %.8s, want the previous record's %.8s", r.Seq, r.PrevHash, prev)
		}
		if r.Hash != chainHash(r.PrevHash, r.Seq, r.Kind) {
			t.Errorf("record %d has hash %.8s, not the one its build computed", r.Seq, r.Hash)
		}
		prev = r.Hash
	}
}

// testAppendAuditEventID checks that the log holds at most one record of
// an event id: a second append of the event (a retry of an append whose
// commit was not acknowledged) writes nothing and returns the first
// record, also when it is queued with other appends, whose records still
// chain; one that records another event under the id is a conflict.
func testAppendAuditEventID(t *testing.T, s store.Store) {
	ctx := t.Context()
	at := time.Date(2031, 3, 4, 5, 6, 7, 891011000, time.UTC)
	const id = "0123456789abcdef0123456789abcdef"
	event := store.AuditRecord{
		EventID: id, At: at, Kind: "executed", Principal: "issuer|tenant|alice", Tool: "notes_write",
		PolicyIDs: []string{"p1"}, Outcome: "succeeded", Latency: 7 * time.Microsecond,
		Details: json.RawMessage(`{"server":"notes"}`),
	}
	first, err := s.AppendAudit(ctx, chained(event))
	if err != nil || first.EventID != id {
		t.Fatalf("AppendAudit = %+v, %v; want the record with its event id", first, err)
	}
	if _, err := s.AppendAudit(ctx, chained(store.AuditRecord{At: at, Kind: "decision"})); err != nil {
		t.Fatalf("AppendAudit without an event id: %v", err)
	}
	retry := event
	retry.At = at.Add(time.Second) // a retry may stamp its time anew
	again, err := s.AppendAudit(ctx, chained(retry))
	if err != nil || !reflect.DeepEqual(again, first) {
		t.Errorf("AppendAudit of the event again = %+v, %v; want the first record %+v", again, err, first)
	}
	other := event
	other.Outcome = "failed"
	if _, err := s.AppendAudit(ctx, chained(other)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AppendAudit of another event under the id = %v, want ErrConflict", err)
	}
	// A write that appends the record along with other statements writes
	// none of them.
	e := testExecution("event-id-1", time.Now())
	if _, _, err := s.BeginExecutionAudited(ctx, e, chained(retry)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("BeginExecutionAudited with a recorded event id = %v, want ErrConflict", err)
	}
	if _, err := s.GetExecution(ctx, e.IdempotencyKey); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetExecution after the refused begin = %v, want ErrNotFound", err)
	}
	checkChain(t, s, 2)

	// Appends racing, a third of them retries of the event: the others
	// each write one record, chained, and the retries each get the first.
	const racers = 12
	start := make(chan struct{})
	got := make([]store.AuditRecord, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			r := store.AuditRecord{At: at, Kind: fmt.Sprintf("k%d", i), EventID: fmt.Sprintf("%032x", i+1)}
			if i%3 == 0 {
				r = retry
			}
			got[i], errs[i] = s.AppendAudit(ctx, chained(r))
		})
	}
	close(start)
	wg.Wait()
	for i := range racers {
		switch {
		case errs[i] != nil:
			t.Errorf("racer %d: %v", i, errs[i])
		case i%3 == 0 && !reflect.DeepEqual(got[i], first):
			t.Errorf("racer %d, a retry, got %+v; want the first record", i, got[i])
		case i%3 != 0 && got[i].Seq <= 2:
			t.Errorf("racer %d got record %d; want a new one", i, got[i].Seq)
		}
	}
	checkChain(t, s, 2+racers-racers/3)
}
