package audit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// entries are what the tests append: every kind of field, and text that
// JSON encoders disagree about.
func entries() []audit.Entry {
	return []audit.Entry{
		{Kind: audit.KindAuthFailed, ClientID: "cursor", Details: json.RawMessage(`{"reason":"expired"}`)},
		{Kind: audit.KindDecision, Principal: "https://issuer|tenant|alice", ClientID: "usher-assistant",
			TokenJTI: "6f1c2a", Tool: "notes_write", DefinitionHash: "def-1", ArgumentsHash: "args-1",
			Decision: "approve", PolicyIDs: []string{"notes-write"}, PolicyHash: "policy-1", RunID: "run-1",
			Latency: 1500 * time.Microsecond},
		{Kind: audit.KindApprovalRequested, Principal: "https://issuer|tenant|alice", Tool: "notes_write",
			ApprovalID: "apr-1", Details: json.RawMessage(` { "z" : 1, "a" : "<b> & \u00e9 ☃ \n" } `)},
		{Kind: audit.KindApprovalDecided, Principal: "https://issuer|tenant|bob", ApprovalID: "apr-1",
			Decision: "approved", Details: json.RawMessage(`{"reason":"ok","n":[1,2.50,-3e2]}`)},
		{Kind: audit.KindExecuted, Principal: "https://issuer|tenant|alice", Tool: "notes_write",
			ApprovalID: "apr-1", Outcome: "succeeded", Latency: 2*time.Millisecond + 999},
		{Kind: audit.KindOutcomeUnknown, Tool: "notes_write", Outcome: "unknown"},
	}
}

// appendAll appends every entry of entries() to st.
func appendAll(t *testing.T, st store.Store) *audit.Log {
	t.Helper()
	log, err := audit.New(st, &audit.Options{Now: newClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries() {
		if err := log.Append(t.Context(), e); err != nil {
			t.Fatalf("Append(%s): %v", e.Kind, err)
		}
	}
	return log
}

func records(t *testing.T, st store.Store) []store.AuditRecord {
	t.Helper()
	rs, err := st.AuditRecords(t.Context(), 0, 1000)
	if err != nil {
		t.Fatalf("AuditRecords: %v", err)
	}
	return rs
}

func verify(t *testing.T, st store.Store, anchors ...store.AuditHead) audit.Report {
	t.Helper()
	rep, err := audit.Verify(t.Context(), st, anchors...)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

func TestAppendAndVerify(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		appendAll(t, st)
		rs := records(t, st)
		if len(rs) != len(entries()) {
			t.Fatalf("the log has %d records, want %d", len(rs), len(entries()))
		}
		for i, r := range rs {
			e := entries()[i]
			if r.Kind != string(e.Kind) || r.Principal != e.Principal || r.TokenJTI != e.TokenJTI {
				t.Errorf("record %d = %+v, want entry %+v", r.Seq, r, e)
			}
			if r.At.Nanosecond()%1000 != 0 || r.Latency != e.Latency.Truncate(time.Microsecond) {
				t.Errorf("record %d: at %v latency %v, want both to the microsecond", r.Seq, r.At, r.Latency)
			}
		}
		// Details are stored canonically: keys sorted, no whitespace,
		// numbers and non-ASCII text as written, no HTML escaping.
		if got, want := string(rs[2].Details), `{"a":"<b> & é ☃ \n","z":1}`; got != want {
			t.Errorf("details stored as %s, want %s", got, want)
		}
		if got, want := string(rs[3].Details), `{"n":[1,2.50,-3e2],"reason":"ok"}`; got != want {
			t.Errorf("details stored as %s, want %s", got, want)
		}

		rep := verify(t, st)
		if !rep.Intact() || rep.Records != int64(len(rs)) {
			t.Errorf("Verify of an untouched log = %+v, want intact with %d records", rep, len(rs))
		}
		last := rs[len(rs)-1]
		if rep.Head != (store.AuditHead{Seq: last.Seq, Hash: last.Hash}) {
			t.Errorf("Verify head = %+v, want seq %d hash %s", rep.Head, last.Seq, last.Hash)
		}
	})
}

func TestVerifyEmptyLog(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		if rep := verify(t, st); !rep.Intact() || rep.Records != 0 || rep.Head != (store.AuditHead{}) {
			t.Errorf("Verify of an empty log = %+v, want intact, no records, the zero head", rep)
		}
		if rep := verify(t, st, store.AuditHead{Seq: 3, Hash: "abc"}); rep.Intact() {
			t.Errorf("Verify of an empty log against an anchor at 3 = %+v, want the anchor missing", rep)
		}
	})
}

// Each tampering, done directly in the database, shows as the problem
// named, at the record named.
func TestVerifyDetectsTampering(t *testing.T) {
	// The log holds records 1 to 6.
	tests := []struct {
		name    string
		tamper  []string
		want    audit.Problem // Detail is not compared
		anchors bool          // verify against the untouched head
	}{
		{"edited principal", []string{`UPDATE audit_log SET principal = 'mallory' WHERE seq = 3`},
			audit.Problem{Seq: 3, Kind: audit.ProblemEdited}, false},
		{"edited decision", []string{`UPDATE audit_log SET decision = 'allow' WHERE seq = 2`},
			audit.Problem{Seq: 2, Kind: audit.ProblemEdited}, false},
		{"edited details", []string{`UPDATE audit_log SET details = '{"reason":"fine"}' WHERE seq = 4`},
			audit.Problem{Seq: 4, Kind: audit.ProblemEdited}, false},
		{"edited policy ids", []string{`UPDATE audit_log SET policy_ids = '[]' WHERE seq = 2`},
			audit.Problem{Seq: 2, Kind: audit.ProblemEdited}, false},
		{"edited latency", []string{`UPDATE audit_log SET latency_us = latency_us + 1 WHERE seq = 5`},
			audit.Problem{Seq: 5, Kind: audit.ProblemEdited}, false},
		{"edited event id", []string{`UPDATE audit_log SET event_id = '00000000000000000000000000000000' WHERE seq = 3`},
			audit.Problem{Seq: 3, Kind: audit.ProblemEdited}, false},
		{"removed event id", []string{`UPDATE audit_log SET event_id = '' WHERE seq = 2`},
			audit.Problem{Seq: 2, Kind: audit.ProblemEdited}, false},
		{"edited hash", []string{`UPDATE audit_log SET hash = 'beef' WHERE seq = 3`},
			audit.Problem{Seq: 3, Kind: audit.ProblemEdited}, false},
		{"deleted middle record", []string{`DELETE FROM audit_log WHERE seq = 3`},
			audit.Problem{Seq: 4, Kind: audit.ProblemGap}, false},
		{"deleted first record", []string{`DELETE FROM audit_log WHERE seq = 1`},
			audit.Problem{Seq: 2, Kind: audit.ProblemGap}, false},
		{"deleted and renumbered", []string{
			`DELETE FROM audit_log WHERE seq = 3`,
			`UPDATE audit_log SET seq = 3 WHERE seq = 4`,
			`UPDATE audit_log SET seq = 4 WHERE seq = 5`,
			`UPDATE audit_log SET seq = 5 WHERE seq = 6`,
		}, audit.Problem{Seq: 3, Kind: audit.ProblemBrokenLink}, false},
		{"swapped records", []string{
			`UPDATE audit_log SET seq = 1000 WHERE seq = 2`,
			`UPDATE audit_log SET seq = 2 WHERE seq = 3`,
			`UPDATE audit_log SET seq = 3 WHERE seq = 1000`,
		}, audit.Problem{Seq: 2, Kind: audit.ProblemBrokenLink}, false},
		{"relinked past a record", []string{
			`UPDATE audit_log SET prev_hash = (SELECT hash FROM audit_log WHERE seq = 2) WHERE seq = 4`,
		}, audit.Problem{Seq: 4, Kind: audit.ProblemBrokenLink}, false},
		// Truncation leaves a valid, shorter chain: only an anchor shows it.
		{"truncated head, with an anchor", []string{`DELETE FROM audit_log WHERE seq = 6`},
			audit.Problem{Seq: 6, Kind: audit.ProblemAnchor}, true},
	}
	forEachDSN(t, func(t *testing.T, dsn string) {
		openStore(t, dsn) // migrated
		db := openEngineDB(t, dsn)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				// One database for every case, emptied before each and
				// then opened anew: a process that appended to the log
				// does not start it again at 1 when it is emptied, but
				// leaves the gap for Verify to find.
				if _, err := db.ExecContext(t.Context(), `DELETE FROM audit_log`); err != nil {
					t.Fatal(err)
				}
				st := openStore(t, dsn)
				appendAll(t, st)
				head := verify(t, st).Head
				if head.Seq != 6 {
					t.Fatalf("the log ends at %d, want 6", head.Seq)
				}
				for _, q := range tt.tamper {
					if _, err := db.ExecContext(t.Context(), q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
				var anchors []store.AuditHead
				if tt.anchors {
					anchors = append(anchors, head)
				}
				rep := verify(t, st, anchors...)
				if rep.Intact() {
					t.Fatalf("Verify after tampering = intact, want %s at seq %d", tt.want.Kind, tt.want.Seq)
				}
				if rep.ProblemCount != len(rep.Problems) {
					t.Errorf("ProblemCount %d, but %d problems listed", rep.ProblemCount, len(rep.Problems))
				}
				found := false
				for _, p := range rep.Problems {
					found = found || (p.Seq == tt.want.Seq && p.Kind == tt.want.Kind)
				}
				if !found {
					t.Errorf("Verify found %v, want %s at seq %d", rep.Problems, tt.want.Kind, tt.want.Seq)
				}
			})
		}
	})
}

// A record of an event already in the log is reported, even in a chain
// that is otherwise intact: the database's unique index keeps a second
// record of an event out, and a log written without it is caught here.
func TestVerifyFindsARepeatedEvent(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, db *sql.DB) {
		log := appendAll(t, st)
		if rep := verify(t, st); !rep.Intact() {
			t.Fatalf("Verify before the repeat = %v, want intact", rep.Problems)
		}
		again := records(t, st)[2]
		if again.EventID == "" {
			t.Fatal("record 3 has no event id")
		}
		if _, err := db.ExecContext(t.Context(), `DROP INDEX audit_log_event_id_key`); err != nil {
			t.Fatal(err)
		}
		e := entries()[0]
		e.EventID = again.EventID
		if err := log.Append(t.Context(), e); err != nil {
			t.Fatalf("Append of event %s again: %v", again.EventID, err)
		}
		rs := records(t, st)
		last := rs[len(rs)-1]
		if last.EventID != again.EventID || last.Seq == again.Seq {
			t.Fatalf("the log ends with seq %d of event %q, want a second record of event %q", last.Seq, last.EventID, again.EventID)
		}
		rep := verify(t, st)
		want := audit.Problem{Seq: last.Seq, Kind: audit.ProblemRepeatedEvent}
		if len(rep.Problems) != 1 || rep.Problems[0].Seq != want.Seq || rep.Problems[0].Kind != want.Kind {
			t.Fatalf("Verify = %v, want only %s at seq %d", rep.Problems, want.Kind, want.Seq)
		}
		if d := rep.Problems[0].Detail; !strings.Contains(d, fmt.Sprintf("seq %d", again.Seq)) {
			t.Errorf("the problem says %q, want it to name seq %d, the first record of the event", d, again.Seq)
		}
	})
}

// Without an anchor a truncated log verifies: the limit the package
// documents.
func TestVerifyCannotSeeTruncationWithoutAnchor(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, db *sql.DB) {
		appendAll(t, st)
		if _, err := db.ExecContext(t.Context(), `DELETE FROM audit_log WHERE seq = 6`); err != nil {
			t.Fatal(err)
		}
		rep := verify(t, st)
		if !rep.Intact() || rep.Head.Seq != 5 {
			t.Errorf("Verify of a truncated log = %+v, want intact up to seq 5", rep)
		}
	})
}

func TestVerifyAnchors(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		appendAll(t, st)
		rs := records(t, st)
		good := store.AuditHead{Seq: rs[2].Seq, Hash: rs[2].Hash}
		if rep := verify(t, st, good); !rep.Intact() {
			t.Errorf("Verify against a true anchor = %v, want intact", rep.Problems)
		}
		bad := store.AuditHead{Seq: rs[2].Seq, Hash: rs[3].Hash}
		rep := verify(t, st, good, bad)
		if rep.Intact() || len(rep.Problems) != 1 || rep.Problems[0].Kind != audit.ProblemAnchor {
			t.Errorf("Verify against an anchor with another hash = %v, want one anchor problem", rep.Problems)
		}
		// Later appends do not disturb an anchor.
		log, _ := audit.New(st, nil)
		if err := log.Append(t.Context(), audit.Entry{Kind: audit.KindDecision}); err != nil {
			t.Fatal(err)
		}
		if rep := verify(t, st, good); !rep.Intact() || rep.Head.Seq != 7 {
			t.Errorf("Verify after an append = %+v, want intact to seq 7", rep)
		}
	})
}

func TestConcurrentAppendsVerify(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		// Two logs on the store, as two replicas would have.
		logs := make([]*audit.Log, 2)
		for i := range logs {
			var err error
			if logs[i], err = audit.New(st, nil); err != nil {
				t.Fatal(err)
			}
		}
		const appenders, each = 8, 10
		start := make(chan struct{})
		errs := make([]error, appenders)
		var wg sync.WaitGroup
		for i := range appenders {
			wg.Go(func() {
				<-start
				for j := range each {
					e := audit.Entry{Kind: audit.KindDecision, Principal: fmt.Sprintf("p%d", i), RunID: fmt.Sprint(j)}
					if err := logs[i%len(logs)].Append(t.Context(), e); err != nil {
						errs[i] = err
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		rep := verify(t, st)
		if !rep.Intact() || rep.Records != appenders*each || rep.Head.Seq != appenders*each {
			t.Errorf("Verify after concurrent appends = %+v, want intact with %d records", rep, appenders*each)
		}
	})
}

// TestProcessesAppendWithExecutions runs two processes (two stores on one
// database, as two replicas) that append plain records and records written
// with an execution's start and finish (Builder with the store's audited
// execution methods) at once: the chain stays gapless and verifies.
func TestProcessesAppendWithExecutions(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		const processes, workers, each = 2, 4, 6
		logs := make([]*audit.Log, processes)
		stores := make([]store.Store, processes)
		for i := range processes {
			stores[i] = openStore(t, dsn)
			var err error
			if logs[i], err = audit.New(stores[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		errs := make([]error, processes*workers)
		var wg sync.WaitGroup
		for w := range processes * workers {
			st, log := stores[w%processes], logs[w%processes]
			wg.Go(func() {
				<-start
				for j := range each {
					key := fmt.Sprintf("w%d-%d", w, j)
					e := audit.Entry{Kind: audit.KindDecision, Principal: "p", Tool: "t", RunID: key}
					if j%2 == 0 {
						if err := log.Append(t.Context(), e); err != nil {
							errs[w] = err
							return
						}
						continue
					}
					build, err := log.Builder(e)
					if err == nil {
						_, _, err = st.BeginExecutionAudited(t.Context(), store.Execution{IdempotencyKey: key, Principal: "p", Tool: "t", ArgumentsHash: "h"}, build)
					}
					if err == nil {
						e.Kind, e.Outcome = audit.KindExecuted, "succeeded"
						if build, err = log.Builder(e); err == nil {
							_, err = st.FinishExecutionAudited(t.Context(), store.FinishExecutionParams{IdempotencyKey: key, Status: store.ExecutionSucceeded, Now: time.Now()}, build)
						}
					}
					if err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		// Half the rounds append one record, half two.
		want := processes * workers * (each/2 + 2*(each/2))
		for i, st := range stores {
			if rep := verify(t, st); !rep.Intact() || rep.Records != int64(want) {
				t.Errorf("Verify in process %d = %+v, want intact with %d records", i, rep, want)
			}
		}
	})
}

// TestBuilderRefuses checks that Builder refuses what Append refuses,
// before any write.
func TestBuilderRefuses(t *testing.T) {
	log, err := audit.New(nopAppender{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []audit.Entry{
		{Kind: "Not A Kind"},
		{Kind: audit.KindDecision, TokenJTI: "eyJ.eyJ.sig"},
		{Kind: audit.KindDecision, Details: json.RawMessage(`{`)},
		{Kind: audit.KindDecision, EventID: "not-hex"},
		{Kind: audit.KindDecision, EventID: strings.ToUpper(audit.NewEventID())},
	} {
		if _, err := log.Builder(e); !errors.Is(err, audit.ErrInvalidEntry) {
			t.Errorf("Builder(%+v) = %v, want ErrInvalidEntry", e, err)
		}
	}
}

// nopAppender is an Appender that is never reached.
type nopAppender struct{}

func (nopAppender) AppendAudit(context.Context, func(store.AuditHead) (store.AuditRecord, error)) (store.AuditRecord, error) {
	return store.AuditRecord{}, errors.New("not reached")
}

func TestAppendRefuses(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		log, err := audit.New(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		jwt := "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2ln"
		tests := []struct {
			name  string
			entry audit.Entry
		}{
			{"no kind", audit.Entry{}},
			{"kind with spaces", audit.Entry{Kind: "tool call"}},
			{"upper-case kind", audit.Entry{Kind: "Decision"}},
			{"a token as the jti", audit.Entry{Kind: audit.KindDecision, TokenJTI: jwt}},
			{"an overlong jti", audit.Entry{Kind: audit.KindDecision, TokenJTI: strings.Repeat("a", 257)}},
			{"negative latency", audit.Entry{Kind: audit.KindExecuted, Latency: -time.Millisecond}},
			{"details not JSON", audit.Entry{Kind: audit.KindDecision, Details: json.RawMessage(`{"a":`)}},
			{"two details", audit.Entry{Kind: audit.KindDecision, Details: json.RawMessage(`{} {}`)}},
			{"NUL in the principal", audit.Entry{Kind: audit.KindDecision, Principal: "a\x00b"}},
			{"principal not UTF-8", audit.Entry{Kind: audit.KindDecision, Principal: "\xff"}},
		}
		for _, tt := range tests {
			if err := log.Append(t.Context(), tt.entry); !errors.Is(err, audit.ErrInvalidEntry) {
				t.Errorf("Append(%s) = %v, want ErrInvalidEntry", tt.name, err)
			}
		}
		if rs := records(t, st); len(rs) != 0 {
			t.Errorf("refused entries wrote %d records", len(rs))
		}
		if err := log.Append(t.Context(), audit.Entry{Kind: audit.KindDecision, TokenJTI: "0b7e6a2c-uuid"}); err != nil {
			t.Errorf("Append with a plain jti: %v", err)
		}
	})
	if _, err := audit.New(nil, nil); err == nil {
		t.Error("New(nil store) = nil error")
	}
}

// The hash is what the package documentation says, computed here from
// the recipe alone.
func TestHashRecipe(t *testing.T) {
	r := store.AuditRecord{
		Seq: 7, At: time.Date(2031, 3, 4, 5, 6, 7, 8000, time.FixedZone("CET", 3600)),
		Kind: "decision", Principal: "iss|tid|oid", ClientID: "c", TokenJTI: "j", Tool: "t",
		DefinitionHash: "d", ArgumentsHash: "a", Decision: "deny", PolicyIDs: []string{"p1", "p2"},
		PolicyHash: "ph", ApprovalID: "apr", RunID: "run", Outcome: "o", Latency: 42 * time.Microsecond,
		Details:  json.RawMessage(`{"b": "x\u2028<y>", "a": [1.50, true, null]}`),
		PrevHash: strings.Repeat("ab", 32),
	}
	body := `{"approval_id":"apr","arguments_hash":"a","at":"2031-03-04T04:06:07.000008Z","client_id":"c",` +
		`"decision":"deny","definition_hash":"d","details":{"a":[1.50,true,null],"b":"x\u2028<y>"},` +
		`"kind":"decision","latency_us":42,"outcome":"o","policy_hash":"ph","policy_ids":["p1","p2"],` +
		`"principal":"iss|tid|oid","run_id":"run","seq":7,"token_jti":"j","tool":"t"}`
	sum := sha256.Sum256([]byte(r.PrevHash + body))
	want := hex.EncodeToString(sum[:])
	got, err := audit.Hash(r)
	if err != nil || got != want {
		t.Errorf("Hash = %s, %v; want %s", got, err, want)
	}

	// Every field is covered.
	fields := map[string]func(r *store.AuditRecord){
		"seq":       func(r *store.AuditRecord) { r.Seq++ },
		"at":        func(r *store.AuditRecord) { r.At = r.At.Add(time.Microsecond) },
		"kind":      func(r *store.AuditRecord) { r.Kind = "x" },
		"principal": func(r *store.AuditRecord) { r.Principal = "x" },
		"client":    func(r *store.AuditRecord) { r.ClientID = "x" },
		"jti":       func(r *store.AuditRecord) { r.TokenJTI = "x" },
		"tool":      func(r *store.AuditRecord) { r.Tool = "x" },
		"defhash":   func(r *store.AuditRecord) { r.DefinitionHash = "x" },
		"argshash":  func(r *store.AuditRecord) { r.ArgumentsHash = "x" },
		"decision":  func(r *store.AuditRecord) { r.Decision = "x" },
		"policyids": func(r *store.AuditRecord) { r.PolicyIDs = []string{"p2", "p1"} },
		"policy":    func(r *store.AuditRecord) { r.PolicyHash = "x" },
		"approval":  func(r *store.AuditRecord) { r.ApprovalID = "x" },
		"run":       func(r *store.AuditRecord) { r.RunID = "x" },
		"outcome":   func(r *store.AuditRecord) { r.Outcome = "x" },
		"latency":   func(r *store.AuditRecord) { r.Latency += time.Microsecond },
		"details":   func(r *store.AuditRecord) { r.Details = json.RawMessage(`{}`) },
		"prev hash": func(r *store.AuditRecord) { r.PrevHash = "" },
		"event id":  func(r *store.AuditRecord) { r.EventID = "0123456789abcdef0123456789abcdef" },
	}
	for name, change := range fields {
		changed := r
		change(&changed)
		if h, err := audit.Hash(changed); err != nil || h == want {
			t.Errorf("changing %s left the hash as it was (%v)", name, err)
		}
	}
	// A record with an event id has it in its body, between details and
	// kind; one without (every record written before event ids) has no
	// such key, and hashes as it always did.
	withID := r
	withID.EventID = "0123456789abcdef0123456789abcdef"
	idBody := strings.Replace(body, `,"kind":`, `,"event_id":"0123456789abcdef0123456789abcdef","kind":`, 1)
	sum = sha256.Sum256([]byte(r.PrevHash + idBody))
	if got, err := audit.Hash(withID); err != nil || got != hex.EncodeToString(sum[:]) {
		t.Errorf("Hash with an event id = %s, %v; want %x", got, err, sum)
	}

	// Only the meaning of details counts, not its spacing or key order.
	same := r
	same.Details = json.RawMessage(`{ "a" : [1.50,true,null] , "b":"x\u2028<y>" }`)
	if h, _ := audit.Hash(same); h != want {
		t.Error("respacing the details changed the hash")
	}
}

// A builder's record has the hash Hash gives it, on any head, and a Link
// around its Seq from which a store recomputes that hash (store.AuditLink):
// also when its details hold what its seq's key looks like.
func TestBuilderLink(t *testing.T) {
	log, err := audit.New(nopAppender{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, details := range []string{`{}`, `{"a":1,"seq":0,"token_jti":"x"}`, `{"s":",\"seq\":0,\"token_jti\":"}`} {
		build, err := log.Builder(audit.Entry{Kind: "decision", Principal: "p", TokenJTI: `,"seq":0,"token_jti":`, Tool: "t", Details: json.RawMessage(details)})
		if err != nil {
			t.Fatal(err)
		}
		for _, head := range []store.AuditHead{{}, {Seq: 9, Hash: "ab"}, {Seq: 123456789012, Hash: strings.Repeat("cd", 32)}} {
			r, err := build(head)
			if err != nil {
				t.Fatal(err)
			}
			want, err := audit.Hash(r)
			if err != nil || r.Hash != want {
				t.Errorf("details %s, head %d: the record's hash is %s, Hash gives %s (%v)", details, head.Seq, r.Hash, want, err)
			}
			if r.Link == nil {
				t.Fatalf("details %s: the record has no Link", details)
			}
			sum := sha256.Sum256([]byte(head.Hash + string(r.Link.Before) + strconv.FormatInt(head.Seq+1, 10) + string(r.Link.After)))
			if got := hex.EncodeToString(sum[:]); got != want {
				t.Errorf("details %s, head %d: the Link gives %s, want %s", details, head.Seq, got, want)
			}
		}
	}
}

// Each exported line, without hash and prev_hash, is the hashed body: a
// reviewer can recompute every hash from the export alone.
func TestExport(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		appendAll(t, st)
		rs := records(t, st)
		var out bytes.Buffer
		if err := audit.Export(t.Context(), st, &out, 0); err != nil {
			t.Fatalf("Export: %v", err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != len(rs) {
			t.Fatalf("Export wrote %d lines, want %d", len(lines), len(rs))
		}
		for i, line := range lines {
			dec := json.NewDecoder(strings.NewReader(line))
			dec.UseNumber()
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("line %d: %v", i, err)
			}
			hash, prev := m["hash"].(string), m["prev_hash"].(string)
			delete(m, "hash")
			delete(m, "prev_hash")
			var body bytes.Buffer
			enc := json.NewEncoder(&body)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(m); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(append([]byte(prev), bytes.TrimSuffix(body.Bytes(), []byte("\n"))...))
			if got := hex.EncodeToString(sum[:]); got != hash || hash != rs[i].Hash {
				t.Errorf("line %d: recomputed hash %s, line says %s, store says %s", i, got, hash, rs[i].Hash)
			}
		}

		// From a sequence on.
		out.Reset()
		if err := audit.Export(t.Context(), st, &out, 4); err != nil {
			t.Fatalf("Export after 4: %v", err)
		}
		if n := strings.Count(out.String(), "\n"); n != len(rs)-4 {
			t.Errorf("Export after 4 wrote %d lines, want %d", n, len(rs)-4)
		}
	})
}

// failingReader fails to read, as a lost database would.
type failingReader struct{}

func (failingReader) AuditRecords(context.Context, int64, int) ([]store.AuditRecord, error) {
	return nil, errors.New("connection lost")
}

func TestReadErrors(t *testing.T) {
	if _, err := audit.Verify(t.Context(), failingReader{}); err == nil {
		t.Error("Verify with a failing reader = nil error")
	}
	if err := audit.Export(t.Context(), failingReader{}, &bytes.Buffer{}, 0); err == nil {
		t.Error("Export with a failing reader = nil error")
	}
}

// A log whose older records have no event id (written before there were
// any) and whose newer ones have one verifies, and exports lines from
// which each hash is recomputed: the older without an event_id key. An
// entry appended again with its event id, as a retry after a lost commit
// acknowledgement does, is recorded once.
func TestVerifyRecordsWithAndWithoutEventIDs(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		ctx := t.Context()
		at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
		for i, kind := range []string{"decision", "executed"} {
			// As a record was built before event ids: none, and a
			// body without the key.
			if _, err := st.AppendAudit(ctx, func(h store.AuditHead) (store.AuditRecord, error) {
				r := store.AuditRecord{Seq: h.Seq + 1, PrevHash: h.Hash, At: at.Add(time.Duration(i) * time.Second), Kind: kind, Tool: "notes_write"}
				var err error
				r.Hash, err = audit.Hash(r)
				return r, err
			}); err != nil {
				t.Fatalf("append an old record: %v", err)
			}
		}
		log, err := audit.New(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		e := audit.Entry{EventID: audit.NewEventID(), Kind: audit.KindExecuted, Tool: "notes_write", At: at.Add(time.Minute)}
		for range 2 {
			if err := log.Append(ctx, e); err != nil {
				t.Fatalf("Append: %v", err)
			}
		}
		if err := log.Append(ctx, audit.Entry{Kind: audit.KindDecision, Tool: "notes_read"}); err != nil {
			t.Fatalf("Append: %v", err)
		}
		rs := records(t, st)
		if len(rs) != 4 {
			t.Fatalf("the log has %d records, want 4 (the entry appended twice recorded once)", len(rs))
		}
		if rs[0].EventID != "" || rs[1].EventID != "" || rs[2].EventID != e.EventID || len(rs[3].EventID) != 32 {
			t.Errorf("event ids %q %q %q %q; want none, none, the entry's, a new one", rs[0].EventID, rs[1].EventID, rs[2].EventID, rs[3].EventID)
		}
		if rep := verify(t, st); !rep.Intact() || rep.Records != 4 {
			t.Errorf("Verify = %+v, want intact with 4 records", rep)
		}

		var out bytes.Buffer
		if err := audit.Export(ctx, st, &out, 0); err != nil {
			t.Fatalf("Export: %v", err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		for i, line := range lines {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("line %d: %v", i, err)
			}
			if _, has := m["event_id"]; has != (i >= 2) {
				t.Errorf("line %d has an event_id: %v, want %v: %s", i, has, i >= 2, line)
			}
		}
	})
}
