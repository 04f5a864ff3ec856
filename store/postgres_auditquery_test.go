package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestPostgresQueryAuditReadsWhatTheCoreReads checks that PostgreSQL's own
// read of a page (pgx, the text columns from the row's raw values) returns
// records equal, field by field, to those the shared code reads through
// database/sql (scanAudit), for records with every field set, with none,
// and with text of every sort; a page of them is more than one of the
// blocks that its records share (text, policy ids, details), and each
// record must still hold its own.
func TestPostgresQueryAuditReadsWhatTheCoreReads(t *testing.T) {
	t.Parallel()
	s, ok := parityStore(t, ownSchemaPostgresURL(t)).(*postgresStore)
	if !ok {
		t.Fatal("not the PostgreSQL store")
	}
	ctx := t.Context()
	at := time.Date(2031, 3, 4, 5, 6, 7, 891011000, time.UTC)
	texts := []string{"", "plain", `quote " and \ back`, "é 日本 🙂", "tab\tline\nend", strings.Repeat("long ", 400)}
	const records = 300
	for i := range records {
		text := texts[i%len(texts)]
		r := AuditRecord{At: at.Add(time.Duration(i) * time.Second), Kind: fmt.Sprintf("kind-%d", i%3)}
		if i%2 == 1 {
			r.Principal, r.ClientID, r.TokenJTI, r.Tool = "iss|t|p"+text, "client"+text, "jti"+text, "tool"+text
			r.DefinitionHash, r.ArgumentsHash, r.Decision = "def"+text, "args"+text, "allow"+text
			r.PolicyIDs, r.PolicyHash, r.ApprovalID, r.RunID = []string{"p1", text, "p3"}, "ph"+text, "apr"+text, "run"+text
			r.Outcome, r.Latency = "ok"+text, time.Duration(i)*time.Millisecond
			r.Details = json.RawMessage(fmt.Sprintf(`{ "server": %q,  "n": [%d, 1.50e3] }`, text, i))
			r.EventID = fmt.Sprintf("%032x", i)
		}
		if _, err := s.AppendAudit(ctx, func(head AuditHead) (AuditRecord, error) {
			r.Seq, r.PrevHash, r.Hash = head.Seq+1, head.Hash, fmt.Sprintf("hash-%d", head.Seq+1)
			return r, nil
		}); err != nil {
			t.Fatalf("AppendAudit %d: %v", i, err)
		}
	}
	for _, q := range []AuditQuery{
		{Limit: MaxAuditQueryLimit},
		{Limit: 5, Descending: true},
		{Limit: 100, Scope: "iss|t|", Kind: "kind-1"},
		{Limit: 100, Principal: "nobody"},
	} {
		want, err := s.core.QueryAudit(ctx, q)
		if err != nil {
			t.Fatalf("%+v: the core's QueryAudit: %v", q, err)
		}
		got, err := s.QueryAudit(ctx, q)
		if err != nil {
			t.Fatalf("%+v: QueryAudit: %v", q, err)
		}
		if q.Limit == MaxAuditQueryLimit && len(want) != records {
			t.Fatalf("the core read %d records, want %d", len(want), records)
		}
		if len(got) != len(want) {
			t.Fatalf("%+v: %d records, the core's %d", q, len(got), len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("%+v: record %d =\n%+v\nthe core's\n%+v", q, i, got[i], want[i])
			}
		}
	}
	if _, err := s.QueryAudit(ctx, AuditQuery{Limit: 0}); err == nil {
		t.Error("QueryAudit with limit 0: nil error")
	}
}

// plainNames reads exactly the arrays it takes as decodeNames reads them,
// and leaves to decodeNames every other.
func TestPlainNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		json  string
		plain bool
	}{
		{`["a"]`, true}, {`["p1","p2","é 日本"]`, true}, {`[""]`, true}, {`["a",""]`, true},
		{`[]`, false}, {`["a",]`, false}, {`[ "a"]`, false}, {`["a" ]`, false}, {`["a""b"]`, false},
		{`["a]`, false}, {`["]`, false}, {`["a\"b"]`, false}, {`["a\u003cb"]`, false},
		{"[\"a\tb\"]", false}, {"[\"\xff\"]", false}, {`[1]`, false}, {`{"a":1}`, false}, {`"a"`, false},
	} {
		got, ok := plainNames(nil, c.json)
		if ok != c.plain {
			t.Errorf("plainNames(%s) ok = %v, want %v", c.json, ok, c.plain)
		}
		if !ok {
			continue
		}
		want, err := decodeNames("test", []byte(c.json))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("plainNames(%s) = %q, decodeNames %q, %v", c.json, got, want, err)
		}
	}
}

// The scanner reads the numbers of a row from PostgreSQL's binary form as
// pgx does, and leaves to rows.Scan the text form, an infinite time and
// anything of another length.
func TestAuditScannerNumbers(t *testing.T) {
	t.Parallel()
	be := func(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
	at := time.Date(2031, 3, 4, 5, 6, 7, 891011000, time.UTC)
	row := func(seq, us, latency []byte) [][]byte {
		raw := make([][]byte, auditColumnCount)
		raw[0], raw[1], raw[15] = seq, us, latency
		return raw
	}
	good := row(be(7), be(at.Sub(pgEpoch).Microseconds()), be(1234))
	sc := auditScanner{binary: true}
	if !sc.numbers(good) || sc.seq != 7 || !sc.at.Equal(at) || sc.latency != 1234 {
		t.Errorf("numbers = %d %v %d, want 7 %v 1234", sc.seq, sc.at, sc.latency, at)
	}
	before := row(be(8), be(-1), be(0))
	if !sc.numbers(before) || !sc.at.Equal(pgEpoch.Add(-time.Microsecond)) {
		t.Errorf("a time before 2000 = %v", sc.at)
	}
	for name, raw := range map[string][][]byte{
		"infinity":         row(be(7), be(math.MaxInt64), be(0)),
		"minus infinity":   row(be(7), be(math.MinInt64), be(0)),
		"a short sequence": row(be(7)[:4], be(0), be(0)),
		"text":             row([]byte("7"), []byte("2031-03-04 05:06:07+00"), []byte("1234")),
	} {
		if sc.numbers(raw) {
			t.Errorf("%s: read as binary", name)
		}
	}
	if text := (auditScanner{}); text.numbers(good) {
		t.Error("columns not in the binary form: read as binary")
	}
}
