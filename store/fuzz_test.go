package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// SQLite compares times as text, so the text form must sort as the times do
// and read back as the time stored.
func FuzzSQLiteTime(f *testing.F) {
	f.Add(int64(0), int64(1))
	f.Add(int64(-62135596800000000), int64(253402300799999999)) // 0001-01-01 and 9999-12-31 in µs
	f.Add(int64(1735689599999999), int64(1735689600000000))     // across a year
	f.Fuzz(func(t *testing.T, a, b int64) {
		const lo, hi = -62135596800000000, 253402300799999999
		if a < lo || a > hi || b < lo || b > hi {
			t.Skip("outside the years 1 to 9999")
		}
		ta, tb := time.UnixMicro(a), time.UnixMicro(b)
		sa, sb := sqliteTime(ta), sqliteTime(tb)
		if len(sa) != len(sqliteTimeLayout) || len(sb) != len(sqliteTimeLayout) {
			t.Fatalf("%q, %q: want fixed width %d", sa, sb, len(sqliteTimeLayout))
		}
		if (sa < sb) != ta.Before(tb) || (sa == sb) != ta.Equal(tb) {
			t.Fatalf("text order of %q and %q differs from time order of %v and %v", sa, sb, ta, tb)
		}
		back, err := parseSQLiteTime(sa)
		if err != nil {
			t.Fatal(err)
		}
		if back != storedTime(ta) {
			t.Fatalf("%v stored as %q reads back as %v", ta, sa, back)
		}
	})
}

// eventPayload never panics, and what it accepts is valid JSON free of what
// PostgreSQL's jsonb refuses.
func FuzzEventPayload(f *testing.F) {
	for _, seed := range []string{
		`{}`, `"\u0000"`, `"\\u0000"`, `"\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`,
		`"\udc00"`, `{"a":["\ud800\udc00",1]}`, `"\ud800\\udc00"`, `{"a":`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		out, err := eventPayload("fuzz", p)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("accepted %q, which is not valid JSON", p)
		}
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		if strings.ContainsRune(fmt.Sprint(v), 0) {
			t.Fatalf("accepted %q, which holds U+0000", p)
		}
	})
}
