package store

import (
	"encoding/json"
	"testing"
	"time"
)

// TestPurgeErasesSQLiteSearch: on SQLite, whose search table no foreign
// key ties to the events, a purged run's words are erased from it too,
// and another run's stay.
func TestPurgeErasesSQLiteSearch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTestSQLite(t)
	for _, id := range []string{"run-gone", "run-kept"} {
		first := NewEvent{Type: "message.user", Payload: json.RawMessage(`{"content":"the secret plans of ` + id + `"}`)}
		if _, _, err := s.OpenRun(ctx, Run{ID: id, Owner: "alice"}, 5, &first); err != nil {
			t.Fatal(err)
		}
	}
	words := func(id string) int {
		var n int
		if err := s.write.QueryRowContext(ctx, `SELECT count(*) FROM run_search WHERE run_id = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if words("run-gone") != 1 || words("run-kept") != 1 {
		t.Fatalf("search rows before: %d, %d; want one each", words("run-gone"), words("run-kept"))
	}
	if err := s.DeleteRun(ctx, "run-gone", nil, Withdrawal{}); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.PurgeDeletedRuns(ctx, time.Now().Add(time.Hour), 10, nil); err != nil || len(ids) != 1 {
		t.Fatalf("PurgeDeletedRuns = %v, %v", ids, err)
	}
	if n := words("run-gone"); n != 0 {
		t.Errorf("the purged run's search rows: %d, want none", n)
	}
	if n := words("run-kept"); n != 1 {
		t.Errorf("the other run's search rows: %d, want 1", n)
	}
}
