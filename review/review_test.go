package review_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/review"
	"github.com/usherhq/usher/store/storetest"
)

var start = time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)

var routes = []string{"/api/audit", "/api/audit/1", "/api/audit/export", "/api/audit/verify", "/api/audit/checkpoints",
	"/api/policy", "/api/policy/explain?user=alice&tool=notes_list", "/api/tools"}

// Only a reviewer of the tenant reads: no token is 401, an app-only
// token (without the API's scope) is 403 insufficient_scope from the
// verifier, a signed-in person outside the
// groups is 403 reviewer_required, on every route; a reviewer of another
// tenant reads only that tenant's records and the records of no one;
// nothing but GET is answered, and nothing changes.
func TestOnlyReviewersRead(t *testing.T) {
	forEachEngine(t, nil, func(t *testing.T, e *env) {
		e.seed(t, 0, 12, start)
		before := e.export(t)
		rita := e.a.token(t, "rita", "security")
		for _, path := range routes {
			for name, c := range map[string]struct {
				s     *site
				token string
				code  int
				err   string
			}{
				"no token":     {e.a, "", 401, "unauthenticated"},
				"app-only":     {e.appOnly, e.appOnly.token(t, "rita", "security"), 403, "insufficient_scope"},
				"non-reviewer": {e.a, e.a.token(t, "alice", "operators"), 403, "reviewer_required"},
				"no group":     {e.a, e.a.token(t, "rolf"), 403, "reviewer_required"},
			} {
				code, body, _ := call(t, "GET", c.s.url+path, c.token)
				if code != c.code || (c.err != "" && errorCode(body) != c.err) {
					t.Errorf("%s: GET %s = %d %s, want %d %s", name, path, code, body, c.code, c.err)
				}
			}
			for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
				if code, body, h := call(t, method, e.a.url+path, rita); code != 405 || h.Get("Allow") != "GET, HEAD" {
					t.Errorf("reviewer: %s %s = %d %s (Allow %q), want 405", method, path, code, body, h.Get("Allow"))
				}
				if code, _, _ := call(t, method, e.a.url+path, e.a.token(t, "alice")); code != 403 {
					t.Errorf("non-reviewer: %s %s = %d, want 403", method, path, code)
				}
			}
		}
		after := e.export(t)
		if len(after) != len(before) || after[len(after)-1].line != before[len(before)-1].line {
			t.Errorf("the log changed: %d records, then %d", len(before), len(after))
		}

		// Each reviewer reads their tenant's records and no one's.
		for _, s := range []*site{e.a, e.b} {
			tok := s.token(t, "rita", "security")
			var want []string
			for _, x := range before {
				if x.inScope(s) {
					want = append(want, x.line)
				}
			}
			got := list(t, s, tok, "limit=1000")
			if !sameLines(got.Records, want) {
				t.Errorf("%s: reviewer reads\n%s\nwant\n%s", s.url, joinRaw(got.Records), strings.Join(want, "\n"))
			}
			for _, x := range before {
				code, body, _ := call(t, "GET", fmt.Sprintf("%s/api/audit/%d", s.url, x.rec.Seq), tok)
				switch {
				case x.inScope(s) && (code != 200 || string(body) != x.line+"\n"):
					t.Errorf("%s: GET record %d = %d %s, want %s", s.url, x.rec.Seq, code, body, x.line)
				case !x.inScope(s) && (code != 404 || errorCode(body) != "not_found"):
					t.Errorf("%s: GET record %d of another tenant = %d %s, want 404", s.url, x.rec.Seq, code, body)
				}
			}
			code, body, h := call(t, "GET", s.url+"/api/audit/export", tok)
			if code != 200 || h.Get("Content-Type") != "application/jsonl" || string(body) != strings.Join(want, "\n")+"\n" {
				t.Errorf("%s: export = %d %q\n%s\nwant\n%s", s.url, code, h.Get("Content-Type"), body, strings.Join(want, "\n"))
			}
		}
		if code, body, _ := call(t, "GET", e.a.url+"/api/audit/checkpoints", rita); code != 200 || !strings.Contains(string(body), `"checkpoints":`) {
			t.Errorf("reviewer: GET the checkpoints = %d %s, want their list", code, body)
		}
		if code, body, _ := call(t, "GET", e.a.url+"/api/audit/99", rita); code != 404 {
			t.Errorf("GET a record that is not there = %d %s", code, body)
		}
	})
}

// Groups and app roles both make a reviewer; nothing else does.
func TestIsReviewer(t *testing.T) {
	if _, err := review.New(nil, nil); err == nil {
		t.Error("New without a store succeeded")
	}
	api, err := review.New(storetest.NewSQLite(t), &review.Options{Groups: []string{"security", "audit"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    identity.Principal
		want bool
	}{
		{identity.Principal{Groups: []string{"staff", "security"}}, true},
		{identity.Principal{Roles: []string{"audit"}}, true},
		{identity.Principal{Groups: []string{"Security"}, Roles: []string{"reviewer"}, Scopes: []string{"security"}}, false},
		{identity.Principal{Name: "security", Email: "security@example.com"}, false},
	} {
		if got := api.IsReviewer(c.p); got != c.want {
			t.Errorf("IsReviewer(%+v) = %v, want %v", c.p, got, c.want)
		}
	}
	if api, _ := review.New(storetest.NewSQLite(t), nil); api.IsReviewer(identity.Principal{Groups: []string{""}}) {
		t.Error("with no groups configured, someone is a reviewer")
	}
}

// Each filter, and filters together, answer exactly the export's lines
// that match, in both orders.
func TestFiltersMatchTheExport(t *testing.T) {
	forEachEngine(t, nil, func(t *testing.T, e *env) {
		e.seed(t, 0, 40, start)
		all := e.export(t)
		tok := e.a.token(t, "rita", "security")
		bob := e.a.id(t, "bob")
		at := func(m int) string { return start.Add(time.Duration(m) * time.Minute).Format(time.RFC3339) }
		var edge time.Time // the time of a record of rita's tenant, in the middle
		for _, x := range all {
			if x.inScope(e.a) && x.rec.Seq > 10 && edge.IsZero() {
				edge = x.rec.At
			}
		}
		for _, c := range []struct {
			query string
			keep  func(x exported) bool
		}{
			{"", func(exported) bool { return true }},
			{"kind=executed", func(x exported) bool { return x.rec.Kind == "executed" }},
			{"principal=" + url.QueryEscape(bob), func(x exported) bool { return x.rec.Principal == bob }},
			{"principal=" + url.QueryEscape(e.b.id(t, "carol")), func(exported) bool { return false }},
			{"tool=notes_list", func(x exported) bool { return x.rec.Tool == "notes_list" }},
			{"server=" + url.QueryEscape("other<&>"), func(x exported) bool { return x.rec.Details.Server == "other<&>" }},
			{"outcome=failed", func(x exported) bool { return x.rec.Outcome == "failed" }},
			{"since=" + at(10), func(x exported) bool { return !x.rec.At.Before(start.Add(10 * time.Minute)) }},
			{"until=" + at(10), func(x exported) bool { return x.rec.At.Before(start.Add(10 * time.Minute)) }},
			{"after=5&before=30", func(x exported) bool { return x.rec.Seq > 5 && x.rec.Seq < 30 }},
			// Finer than the microseconds a record's time is kept to: the
			// record at edge is before since, and before until.
			{"since=" + url.QueryEscape(edge.Add(100).Format(time.RFC3339Nano)), func(x exported) bool { return x.rec.At.After(edge) }},
			{"until=" + url.QueryEscape(edge.Add(100).Format(time.RFC3339Nano)), func(x exported) bool { return !x.rec.At.After(edge) }},
			{"kind=decision&server=demo&since=" + at(3) + "&until=" + at(33), func(x exported) bool {
				return x.rec.Kind == "decision" && x.rec.Details.Server == "demo" &&
					!x.rec.At.Before(start.Add(3*time.Minute)) && x.rec.At.Before(start.Add(33*time.Minute))
			}},
		} {
			var want []string
			for _, x := range all {
				if x.inScope(e.a) && c.keep(x) {
					want = append(want, x.line)
				}
			}
			for _, order := range []string{"asc", "desc"} {
				w := slices.Clone(want)
				if order == "desc" {
					slices.Reverse(w)
				}
				got := follow(t, e.a, tok, c.query+"&order="+order+"&limit=3")
				if !slices.Equal(got, w) {
					t.Errorf("%s order=%s: got\n%s\nwant\n%s", c.query, order, strings.Join(got, "\n"), strings.Join(w, "\n"))
				}
			}
		}
	})
}

// follow pages through a query by its cursors and returns every record.
func follow(t *testing.T, s *site, tok, query string) []string {
	t.Helper()
	var out []string
	q := query
	for range 1000 {
		p := list(t, s, tok, q)
		for _, r := range p.Records {
			out = append(out, string(r))
		}
		if p.Next == nil {
			return out
		}
		q = "cursor=" + url.QueryEscape(*p.Next)
	}
	t.Fatalf("%s: no end after 1000 pages", query)
	return nil
}

// Paging by cursor, ascending and descending, returns every record once
// while records are being appended.
func TestPagingUnderConcurrentAppends(t *testing.T) {
	forEachEngine(t, nil, func(t *testing.T, e *env) {
		e.seed(t, 0, 30, start)
		tok := e.a.token(t, "rita", "security")
		var wg sync.WaitGroup
		done := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			for i := 30; i < 90; i++ {
				if err := e.log.Append(t.Context(), e.entry(i, start)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		// Descending, from the head when it starts: each record at or
		// below it, once.
		first := list(t, e.a, tok, "order=desc&limit=1")
		var top int64
		if len(first.Records) == 1 {
			top = seqOf(t, first.Records[0])
		}
		desc := follow(t, e.a, tok, fmt.Sprintf("order=desc&limit=4&before=%d", top+1))

		// Ascending: a short page is the end only once the appends are over.
		var asc []string
		q := "limit=4"
		for range 10_000 {
			finished := isClosed(done)
			p := list(t, e.a, tok, q)
			if p.Next == nil && !finished {
				continue // the records after the last full page are asked again
			}
			for _, r := range p.Records {
				asc = append(asc, string(r))
			}
			if p.Next == nil {
				break
			}
			q = "cursor=" + url.QueryEscape(*p.Next)
		}
		wg.Wait()
		var want, wantDesc []string
		for _, x := range e.export(t) {
			if x.inScope(e.a) {
				want = append(want, x.line)
				if x.rec.Seq <= top {
					wantDesc = append(wantDesc, x.line)
				}
			}
		}
		slices.Reverse(wantDesc)
		if !slices.Equal(asc, want) {
			t.Errorf("ascending pages: %d records, want %d", len(asc), len(want))
		}
		if !slices.Equal(desc, wantDesc) {
			t.Errorf("descending pages: %d records, want %d (top %d)", len(desc), len(wantDesc), top)
		}
	})
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func seqOf(t *testing.T, raw json.RawMessage) int64 {
	t.Helper()
	var r struct{ Seq int64 }
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r.Seq
}

// Hostile input is answered 400 with a code that says what is wrong.
func TestHostileInput(t *testing.T) {
	forEachEngine(t, nil, func(t *testing.T, e *env) {
		e.seed(t, 0, 10, start)
		tok := e.a.token(t, "rita", "security")
		p := list(t, e.a, tok, "kind=decision&limit=1")
		if p.Next == nil {
			t.Fatal("no next after a full page")
		}
		next := *p.Next
		raw, _ := base64.RawURLEncoding.DecodeString(next)
		tampered := base64.RawURLEncoding.EncodeToString(bytes.Replace(raw, []byte(`"limit":1`), []byte(`"limit":2`), 1))
		// A cursor made with its checksum, as anyone can make one, holding
		// a filter no parameter may hold.
		forged := func(body string) string {
			sum := sha256.Sum256([]byte(body))
			return base64.RawURLEncoding.EncodeToString(append([]byte(body), hex.EncodeToString(sum[:8])...))
		}
		for _, c := range []struct{ path, code string }{
			{"/api/audit?limit=1001", "invalid_parameter"},
			{"/api/audit?limit=0", "invalid_parameter"},
			{"/api/audit?limit=99999999999999999999", "invalid_parameter"},
			{"/api/audit?limit=-1", "invalid_parameter"},
			{"/api/audit?after=-1", "invalid_parameter"},
			{"/api/audit?before=-5", "invalid_parameter"},
			{"/api/audit?since=yesterday", "invalid_parameter"},
			{"/api/audit?until=2031-13-01T00:00:00Z", "invalid_parameter"},
			{"/api/audit?order=random", "invalid_parameter"},
			{"/api/audit?kind=a&kind=b", "invalid_parameter"},
			{"/api/audit?kind=%ff", "invalid_parameter"},
			{"/api/audit?tool=a%00b", "invalid_parameter"},
			{"/api/audit?bogus=1", "unknown_parameter"},
			{"/api/audit?cursor=" + url.QueryEscape(next) + "&kind=executed", "invalid_cursor"},
			{"/api/audit?cursor=" + tampered, "invalid_cursor"},
			{"/api/audit?cursor=" + next[:len(next)-2], "invalid_cursor"},
			{"/api/audit?cursor=%%%", "invalid_query"},
			{"/api/audit?kind=%zz", "invalid_query"},
			{"/api/audit?cursor=" + strings.Repeat("A", 5000), "invalid_cursor"},
			{"/api/audit?cursor=" + forged(`{"kind":"a\u0000b","limit":3}`), "invalid_cursor"},
			{"/api/audit/-1", "invalid_seq"},
			{"/api/audit/0", "invalid_seq"},
			{"/api/audit/1x", "invalid_seq"},
			{"/api/audit/99999999999999999999", "invalid_seq"},
			{"/api/audit/1?x=1", "unknown_parameter"},
			{"/api/audit/export?after=-1", "invalid_parameter"},
			{"/api/audit/export?kind=x", "unknown_parameter"},
			{"/api/audit/verify?after=x", "invalid_parameter"},
			{"/api/audit/verify?from=1", "unknown_parameter"},
			{"/api/audit/checkpoints?foo=1", "unknown_parameter"},
			{"/api/audit/checkpoints?after=1&after=2", "invalid_parameter"},
			{"/api/audit/checkpoints?limit=1&limit=1", "invalid_parameter"},
			{"/api/audit/checkpoints?after=", "invalid_parameter"},
			{"/api/audit/checkpoints?after=-1", "invalid_parameter"},
			{"/api/audit/checkpoints?limit=0", "invalid_parameter"},
			{"/api/audit/checkpoints?limit=1001", "invalid_parameter"},
			{"/api/audit/checkpoints?limit=abc", "invalid_parameter"},
			{"/api/audit/checkpoints?%zz", "invalid_query"},
		} {
			code, body, _ := call(t, "GET", e.a.url+c.path, tok)
			if code != 400 || errorCode(body) != c.code {
				t.Errorf("GET %s = %d %s, want 400 %s", c.path, code, body, c.code)
			}
		}
		// The greatest sequence number is one no record has: not found.
		if code, body, _ := call(t, "GET", e.a.url+"/api/audit/9223372036854775807", tok); code != 404 {
			t.Errorf("GET /api/audit/9223372036854775807 = %d %s, want 404", code, body)
		}
		// The cursor with its own query, or alone, goes on.
		for _, q := range []string{"cursor=" + url.QueryEscape(next), "kind=decision&cursor=" + url.QueryEscape(next), "cursor=" + url.QueryEscape(next) + "&limit=5"} {
			if p := list(t, e.a, tok, q); len(p.Records) == 0 || seqOf(t, p.Records[0]) <= seqOf(t, list(t, e.a, tok, "kind=decision&limit=1").Records[0]) {
				t.Errorf("%s: %s", q, joinRaw(p.Records))
			}
		}
	})
}

// Verification walks the chain in bounded steps to the head.
func TestVerifyInSteps(t *testing.T) {
	forEachEngine(t, &review.Options{Groups: []string{"security"}, VerifyLimit: 7, Logger: quiet}, func(t *testing.T, e *env) {
		e.seed(t, 0, 20, start)
		tok := e.b.token(t, "rita", "security")
		type step struct {
			Intact      bool `json:"intact"`
			Head        struct{ Seq int64 }
			VerifiedTo  int64  `json:"verified_to"`
			Records     int64  `json:"records"`
			Resume      *int64 `json:"resume"`
			FirstBroken *int64 `json:"first_broken"`
		}
		var steps []step
		q := ""
		for range 10 {
			code, body, _ := call(t, "GET", e.b.url+"/api/audit/verify"+q, tok)
			var s step
			if code != 200 || json.Unmarshal(body, &s) != nil {
				t.Fatalf("verify%s = %d %s", q, code, body)
			}
			steps = append(steps, s)
			if s.Resume == nil {
				break
			}
			q = fmt.Sprintf("?after=%d", *s.Resume)
		}
		if len(steps) != 3 || steps[0].VerifiedTo != 7 || steps[1].VerifiedTo != 14 || steps[2].VerifiedTo != 20 ||
			steps[2].Head.Seq != 20 || !steps[0].Intact || !steps[1].Intact || !steps[2].Intact {
			t.Errorf("steps = %+v", steps)
		}
		if code, body, _ := call(t, "GET", e.b.url+"/api/audit/verify?after=21", tok); code != 404 {
			t.Errorf("verify after a record that is not there = %d %s", code, body)
		}
	})
}

func sameLines(got []json.RawMessage, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if string(got[i]) != want[i] {
			return false
		}
	}
	return true
}

func joinRaw(rs []json.RawMessage) string {
	var b strings.Builder
	for _, r := range rs {
		b.Write(r)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestVerifyChecksCheckpoints: with the audit keys, a verification step
// checks the signed checkpoints of its records against them, and the
// step that reaches the head those after it: the steps of an intact log
// verify the checkpoint once, and a log cut short after its checkpoint is
// broken at the checkpoint's sequence number, as `usher audit verify`
// reports it.
func TestVerifyChecksCheckpoints(t *testing.T) {
	t.Parallel()
	for name, dsnOf := range map[string]func(t *testing.T) string{
		"SQLite":     func(t *testing.T) string { return filepath.Join(t.TempDir(), "usher.db") },
		"PostgreSQL": func(t *testing.T) string { return storetest.PostgresURL(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dsn := dsnOf(t)
			st := storetest.Migrated(t, dsn)
			seal := make([]byte, 32)
			rand.Read(seal)
			const origin = "usher.example/audit"
			keys, err := audit.NewKeys(st, seal, origin, nil)
			if err != nil {
				t.Fatal(err)
			}
			cp, err := audit.NewCheckpointer(st, keys, &audit.CheckpointerOptions{Origin: origin, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, st, &review.Options{Groups: []string{"security"}, VerifyLimit: 7, AuditKeys: keys, Logger: quiet})
			e.seed(t, 0, 20, start)
			if _, stored, err := cp.Checkpoint(t.Context()); err != nil || !stored {
				t.Fatalf("Checkpoint = %v, %v", stored, err)
			}
			tok := e.a.token(t, "rita", "security")
			steps := func() (intact bool, checkpoints int64, broken []int64) {
				intact = true
				q := ""
				for range 10 {
					code, body, _ := call(t, "GET", e.a.url+"/api/audit/verify"+q, tok)
					var s struct {
						Intact      bool   `json:"intact"`
						Checkpoints int64  `json:"checkpoints"`
						Resume      *int64 `json:"resume"`
						Problems    []struct {
							Seq  int64  `json:"seq"`
							Kind string `json:"kind"`
						} `json:"problems"`
					}
					if code != 200 || json.Unmarshal(body, &s) != nil {
						t.Fatalf("verify%s = %d %s", q, code, body)
					}
					intact, checkpoints = intact && s.Intact, checkpoints+s.Checkpoints
					for _, p := range s.Problems {
						if p.Kind == string(audit.ProblemCheckpoint) {
							broken = append(broken, p.Seq)
						}
					}
					if s.Resume == nil {
						return intact, checkpoints, broken
					}
					q = fmt.Sprintf("?after=%d", *s.Resume)
				}
				t.Fatal("the steps did not reach the head")
				return
			}
			if intact, n, broken := steps(); !intact || n != 1 || len(broken) != 0 {
				t.Fatalf("the steps of the intact log: intact %v, %d checkpoints, broken at %v; want intact, 1, none", intact, n, broken)
			}

			db, err := sql.Open(map[string]string{"SQLite": "sqlite", "PostgreSQL": "pgx"}[name], dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.ExecContext(t.Context(), `DELETE FROM audit_log WHERE seq > 16`); err != nil {
				t.Fatal(err)
			}
			if intact, _, broken := steps(); intact || !slices.Equal(broken, []int64{20}) {
				t.Errorf("the steps of the log cut short at 16: intact %v, checkpoint_mismatch at %v; want broken at 20", intact, broken)
			}
		})
	}
}
