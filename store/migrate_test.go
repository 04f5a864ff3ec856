package store

import "testing"

// TestNotMigrated: the error of a schema behind names the pending
// versions, a long run of them by its ends, and says what to run.
func TestNotMigrated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		versions []int64
		want     string
	}{
		{nil, ""},
		{[]int64{40}, `store: database schema is not up to date: migration 40 pending (run "usher migrate")`},
		{[]int64{39, 40}, `store: database schema is not up to date: migrations 39, 40 pending (run "usher migrate")`},
		{[]int64{1, 2, 3, 4, 5}, `store: database schema is not up to date: 5 migrations pending (1 to 5; run "usher migrate")`},
		{[]int64{1, 2, 3, 7}, `store: database schema is not up to date: migrations 1, 2, 3, 7 pending (run "usher migrate")`},
	} {
		got := ""
		if err := notMigrated(tc.versions); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("notMigrated(%v) = %q, want %q", tc.versions, got, tc.want)
		}
	}
}
