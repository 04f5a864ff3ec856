package store

import (
	"strings"
	"testing"
	"time"
)

// TestBacklogUsesIndexes checks, on both engines, that the statements the
// metrics read on every scrape and the status reads (runQueue,
// pendingApprovals, oldestPendingApproval) find their rows by indexes, not by
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
			now := []any{storedTime(time.Now())}
			for _, c := range []struct {
				name            string
				q               stmt
				runs, approvals int // the subqueries that must read each by an index
			}{
				{"runQueue", runQueue, 3, 0},
				{"pendingApprovals", pendingApprovals, 0, 1},
				{"oldestPendingApproval", oldestPendingApproval, 0, 1},
			} {
				plan, err := eng.plan(t.Context(), x, c.q, now)
				if err != nil {
					t.Fatalf("the plan of %s: %v", c.name, err)
				}
				for _, scan := range []string{"Seq Scan", "SCAN runs", "SCAN approvals"} {
					if strings.Contains(plan, scan) {
						t.Errorf("%s reads a whole table (%s):\n%s", c.name, scan, plan)
					}
				}
				runs := 0
				for _, index := range []string{"runs_status_idx", "runs_queued_idx", "runs_lease_expiry_idx"} {
					runs += strings.Count(plan, "INDEX "+index) + strings.Count(plan, "using "+index)
				}
				if approvals := strings.Count(plan, "approvals_pending_expiry_idx"); runs < c.runs || approvals < c.approvals {
					t.Errorf("%s reads %d runs and %d approvals subqueries by an index, want %d and %d:\n%s", c.name, runs, approvals, c.runs, c.approvals, plan)
				}
			}
		})
	}
}
