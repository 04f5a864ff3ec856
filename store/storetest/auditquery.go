package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testQueryAudit checks every filter of QueryAudit, alone and together,
// against the same filter applied here to the whole log, in both orders
// and page by page.
func testQueryAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	start := time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)
	principals := []string{"iss|t1|alice", "iss|t1|bob", "iss|t2|carol", "", "iss|t10|dave"}
	kinds := []string{"executed", "denied", "approval_requested"}
	tools := []string{"notes_write", "notes_read"}
	servers := []string{"demo", "other", ""}
	outcomes := []string{"succeeded", "failed", ""}
	for i := range 60 {
		r := store.AuditRecord{
			At: start.Add(time.Duration(i) * time.Minute), Kind: kinds[i%len(kinds)],
			Principal: principals[i%len(principals)], Tool: tools[i%len(tools)],
			Outcome: outcomes[i%len(outcomes)],
		}
		if sv := servers[i%len(servers)]; sv != "" {
			r.Details = json.RawMessage(fmt.Sprintf(`{"server": %q, "n": %d}`, sv, i))
		}
		if _, err := s.AppendAudit(ctx, chained(r)); err != nil {
			t.Fatalf("AppendAudit %d: %v", i, err)
		}
	}
	all, err := s.AuditRecords(ctx, 0, 1000)
	if err != nil || len(all) != 60 {
		t.Fatalf("AuditRecords: %d records, %v", len(all), err)
	}
	serverOf := func(r store.AuditRecord) string {
		var d struct{ Server string }
		_ = json.Unmarshal(r.Details, &d)
		return d.Server
	}
	queries := []store.AuditQuery{
		{},
		{Scope: "iss|t1|"},
		{Scope: "iss|t2|"},
		{Kind: "denied"},
		{Principal: "iss|t1|bob"},
		{Tool: "notes_read"},
		{Server: "demo"},
		{Server: "nowhere"},
		{Outcome: "failed"},
		{Since: start.Add(10 * time.Minute)},
		{Until: start.Add(10 * time.Minute)},
		{Since: start.Add(5 * time.Minute), Until: start.Add(50 * time.Minute), Scope: "iss|t1|", Kind: "executed"},
		{After: 7, Before: 40, Tool: "notes_write", Server: "other", Outcome: "succeeded"},
	}
	for _, q := range queries {
		var want []store.AuditRecord
		for _, r := range all {
			keep := r.Seq > q.After && (q.Before == 0 || r.Seq < q.Before) &&
				(q.Scope == "" || r.Principal == "" || strings.HasPrefix(r.Principal, q.Scope)) &&
				(q.Kind == "" || r.Kind == q.Kind) && (q.Principal == "" || r.Principal == q.Principal) &&
				(q.Tool == "" || r.Tool == q.Tool) && (q.Server == "" || serverOf(r) == q.Server) &&
				(q.Outcome == "" || r.Outcome == q.Outcome) &&
				(q.Since.IsZero() || !r.At.Before(q.Since)) && (q.Until.IsZero() || r.At.Before(q.Until))
			if keep {
				want = append(want, r)
			}
		}
		for _, desc := range []bool{false, true} {
			name := fmt.Sprintf("%+v desc=%v", q, desc)
			wantOrder := slices.Clone(want)
			if desc {
				slices.Reverse(wantOrder)
			}
			// Page by 7, as a client follows its cursor.
			var got []store.AuditRecord
			page := q
			page.Descending, page.Limit = desc, 7
			for range 100 {
				rs, err := s.QueryAudit(ctx, page)
				if err != nil {
					t.Fatalf("%s: QueryAudit: %v", name, err)
				}
				got = append(got, rs...)
				if len(rs) < page.Limit {
					break
				}
				if desc {
					page.Before = rs[len(rs)-1].Seq
				} else {
					page.After = rs[len(rs)-1].Seq
				}
			}
			if !equalSeqs(got, wantOrder) {
				t.Errorf("%s: got seqs %v, want %v", name, seqsOf(got), seqsOf(wantOrder))
			}
		}
	}
	if rs, err := s.QueryAudit(ctx, store.AuditQuery{After: 2, Before: 4, Limit: 1}); err != nil || len(rs) != 1 || !reflect.DeepEqual(rs[0], all[2]) {
		t.Errorf("QueryAudit of record 3 = %+v, %v; want %+v", rs, err, all[2])
	}
	for _, bad := range []store.AuditQuery{
		{Limit: 0}, {Limit: store.MaxAuditQueryLimit + 1}, {Limit: 1, After: -1}, {Limit: 1, Before: -5},
		{Limit: 1, Kind: "a\x00b"}, {Limit: 1, Tool: "\xff"},
	} {
		if _, err := s.QueryAudit(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("QueryAudit(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

func equalSeqs(a, b []store.AuditRecord) bool {
	return slices.Equal(seqsOf(a), seqsOf(b))
}

func seqsOf(rs []store.AuditRecord) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}
