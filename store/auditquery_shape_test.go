package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Every combination of an AuditQuery's parts has its statement: as many
// parameters as arguments, each used, the same text again the next time,
// and a text of its own.
func TestAuditQueryShapes(t *testing.T) {
	if n := len(auditFilters(AuditQuery{})); auditSince != auditKind<<n {
		t.Fatalf("auditShape has room for %d equality filters, auditFilters has %d", auditSince/auditKind-1, n)
	}
	at := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	placeholder := regexp.MustCompile(`\$(\d+)`)
	seen := map[string]auditShape{}
	for shape := range auditShapes {
		q := AuditQuery{Limit: 10, After: 3}
		set := func(bit auditShape, f func()) {
			if shape&bit != 0 {
				f()
			}
		}
		set(auditBefore, func() { q.Before = 9 })
		set(auditScope, func() { q.Scope = "iss|t|" })
		set(auditKind, func() { q.Kind = "k" })
		set(auditKind<<1, func() { q.Principal = "p" })
		set(auditKind<<2, func() { q.Tool = "t" })
		set(auditKind<<3, func() { q.Server = "s" })
		set(auditKind<<4, func() { q.Outcome = "o" })
		set(auditSince, func() { q.Since = at })
		set(auditUntil, func() { q.Until = at.Add(time.Hour) })
		set(auditDesc, func() { q.Descending = true })
		s, args := auditQuerySQL(q)
		used := map[int]bool{}
		for _, m := range placeholder.FindAllStringSubmatch(s.pg, -1) {
			n, _ := strconv.Atoi(m[1])
			used[n] = true
		}
		if len(used) != len(args) || !used[len(args)] {
			t.Errorf("shape %010b: %d parameters used (%v) for %d arguments: %s", shape, len(used), used, len(args), s.pg)
		}
		if args[len(args)-1] != 10 {
			t.Errorf("shape %010b: the last argument is %v, want the limit", shape, args[len(args)-1])
		}
		if again, _ := auditQuerySQL(q); again != s {
			t.Errorf("shape %010b: another statement the second time", shape)
		}
		if other, ok := seen[s.pg]; ok {
			t.Errorf("shapes %010b and %010b have the same statement", other, shape)
		}
		seen[s.pg] = shape
	}
}

// EachAudit hands over the records in the query's order and stops at the
// first error of its function, which it returns as it is; the store reads
// on afterwards. Both engines.
func TestEachAuditStopsAtAnError(t *testing.T) {
	t.Parallel()
	for _, eng := range []struct {
		name string
		dsn  func(testing.TB) string
	}{
		{"SQLite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "usher.db") }},
		{"PostgreSQL", ownSchemaPostgresURL},
	} {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			s := parityStore(t, eng.dsn(t))
			ctx := t.Context()
			for i := range 5 {
				if _, err := s.AppendAudit(ctx, func(head AuditHead) (AuditRecord, error) {
					return AuditRecord{Seq: head.Seq + 1, At: time.Now().Truncate(time.Microsecond), Kind: "k", PrevHash: head.Hash,
						Hash: fmt.Sprintf("hash-%d", i), Details: json.RawMessage(`{}`)}, nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			stop := errors.New("enough")
			var seen []int64
			err := s.EachAudit(ctx, AuditQuery{Limit: 10, Descending: true}, func(r AuditRecord) error {
				seen = append(seen, r.Seq)
				if len(seen) == 3 {
					return stop
				}
				return nil
			})
			if err != stop || !slices.Equal(seen, []int64{5, 4, 3}) {
				t.Fatalf("EachAudit = %v after %v, want the function's error after [5 4 3]", err, seen)
			}
			all, err := s.QueryAudit(ctx, AuditQuery{Limit: 10})
			if err != nil || len(all) != 5 {
				t.Fatalf("QueryAudit after = %d records, %v; want 5", len(all), err)
			}
			if err := s.EachAudit(ctx, AuditQuery{}, func(AuditRecord) error { return nil }); !errors.Is(err, ErrInvalid) {
				t.Errorf("EachAudit with limit 0 = %v, want ErrInvalid", err)
			}
		})
	}
}
