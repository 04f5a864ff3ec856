package store

import (
	"strings"
	"testing"
	"time"
)

// TestBacklogUsesIndexes checks, on both engines, that the statement
// metrics read on every scrape (backlog) finds its rows by indexes, not by
// reading every run or approval ever recorded: the runs by one of the
// InProgress runs (runs_status_idx), of the queued runs (runs_queued_idx)
// or of the leases (runs_lease_expiry_idx), whichever the planner prefers;
// the approvals by the pending approvals' partial index. On PostgreSQL
// sequential scans are turned off for the question: the plan still scans
// the table when no index serves it.
func TestBacklogUsesIndexes(t *testing.T) {
	t.Parallel()
	for _, eng := range planEngines {
		t.Run(eng.name, func(t *testing.T) {
			c := parityCore(t, parityStore(t, eng.dsn(t)))
			x := executor{q: c.write, lite: eng.name == "SQLite"}
			plan, err := eng.plan(t.Context(), x, backlog, []any{storedTime(time.Now())})
			if err != nil {
				t.Fatalf("the plan of backlog: %v", err)
			}
			for _, scan := range []string{"Seq Scan", "SCAN runs", "SCAN approvals"} {
				if strings.Contains(plan, scan) {
					t.Errorf("backlog reads a whole table (%s):\n%s", scan, plan)
				}
			}
			runs := 0
			for _, index := range []string{"runs_status_idx", "runs_queued_idx", "runs_lease_expiry_idx"} {
				runs += strings.Count(plan, "INDEX "+index) + strings.Count(plan, "using "+index)
			}
			if approvals := strings.Count(plan, "approvals_pending_expiry_idx"); runs != 3 || approvals != 2 {
				t.Errorf("backlog reads %d runs and %d approvals subqueries by an index, want 3 and 2:\n%s", runs, approvals, plan)
			}
		})
	}
}
