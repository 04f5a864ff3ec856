package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSweepsUseIndexes checks, on both engines, that the statements of
// the minute sweeps of executions (markAbandonedExecutions,
// endAwaitingInputExecutions) can find their rows by a partial index of
// the open executions, not only by reading every execution ever
// recorded, and those that end refresh tokens' repeats by a partial index
// of the salts kept. On PostgreSQL sequential scans are turned off for the
// question: the plan still scans the table when no index serves it.
func TestSweepsUseIndexes(t *testing.T) {
	now := storedTime(time.Now())
	sweeps := map[string]struct {
		q     stmt
		args  []any
		index string
	}{
		"markAbandonedExecutions":    {markAbandonedExecutions, []any{now}, "tool_executions_started_idx"},
		"endAwaitingInputExecutions": {endAwaitingInputExecutions, []any{now, json.RawMessage(`{}`), now}, "tool_executions_awaiting_idx"},
		// A rotation's (endRepeatsOf) and the hourly OAuth sweep's
		// (endRepeats) clearing of repeats' salts.
		"endRepeatsOf": {endRepeatsOf, []any{"hash"}, "oauth_refresh_tokens_successor_idx"},
		"endRepeats":   {endRepeats, []any{now}, "oauth_refresh_tokens_repeat_idx"},
	}
	for _, eng := range planEngines {
		t.Run(eng.name, func(t *testing.T) {
			c := parityCore(t, parityStore(t, eng.dsn(t)))
			x := executor{q: c.write, lite: eng.name == "SQLite"}
			for name, s := range sweeps {
				plan, err := eng.plan(t.Context(), x, s.q, s.args)
				if err != nil {
					t.Fatalf("the plan of %s: %v", name, err)
				}
				if !strings.Contains(plan, s.index) {
					t.Errorf("%s does not use %s:\n%s", name, s.index, plan)
				}
			}
		})
	}
}

// planEngines are the engines whose query plans the tests read, each
// with its way to a fresh, migrated database and to a plan.
var planEngines = []struct {
	name string
	dsn  func(testing.TB) string
	plan func(ctx context.Context, x executor, q stmt, args []any) (string, error)
}{
	{"SQLite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "usher.db") }, sqlitePlan},
	{"PostgreSQL", ownSchemaPostgresURL, postgresPlan},
}

// postgresPlan is PostgreSQL's plan of q with args, sequential scans off.
func postgresPlan(ctx context.Context, x executor, q stmt, args []any) (string, error) {
	conn, err := x.q.(*sql.DB).Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET enable_seqscan = off"); err != nil {
		return "", err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "RESET enable_seqscan") //nolint:errcheck // the connection goes back to the pool either way
	return rowsText(conn.QueryContext(ctx, "EXPLAIN "+x.text(q), x.args(args)...))
}

// sqlitePlan is SQLite's plan of q with args.
func sqlitePlan(ctx context.Context, x executor, q stmt, args []any) (string, error) {
	rows, err := x.q.QueryContext(ctx, "EXPLAIN QUERY PLAN "+x.text(q), x.args(args)...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			return "", err
		}
		b.WriteString(detail + "\n")
	}
	return b.String(), rows.Err()
}

// rowsText joins the one text column of rows, one line each.
func rowsText(rows *sql.Rows, err error) (string, error) {
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", err
		}
		b.WriteString(line + "\n")
	}
	return b.String(), rows.Err()
}

// TestTenantApprovalsUseIndex checks, on both engines, that a reviewer's
// listing of every approval of a tenant (listTenantApprovals), filtered or
// not, reads approvals_tenant_created_idx rather than every approval.
func TestTenantApprovalsUseIndex(t *testing.T) {
	after := storedTime(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
	for _, eng := range planEngines {
		t.Run(eng.name, func(t *testing.T) {
			c := parityCore(t, parityStore(t, eng.dsn(t)))
			x := executor{q: c.write, lite: eng.name == "SQLite"}
			for _, filters := range [][3]string{{"", "", ""}, {"pending", "notes_write", "i|t|alice"}} {
				plan, err := eng.plan(t.Context(), x, listTenantApprovals,
					[]any{"t", "i|t|", filters[0], filters[1], filters[2], after, "", int64(20)})
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(plan, "approvals_tenant_created_idx") {
					t.Errorf("filters %q: the listing does not use approvals_tenant_created_idx:\n%s", filters, plan)
				}
			}
		})
	}
}
