package store

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// auditPlanRows is the log the plans are asked of: 20,000 records, each
// value of a kind, tool, server, outcome or principal in one record of a
// thousand, as a reviewer's filter picks the few records of one tool or
// person out of many. (For a value in most records, PostgreSQL rightly
// reads the primary key in order instead: a page is then as near.)
const auditPlanRows = `INSERT INTO audit_log (seq, at, kind, principal, tool, outcome, details, prev_hash, hash)
SELECT n, $1, 'kind-' || (n % 1000), 'iss|t|p-' || (n % 1000), 'tool-' || (n % 1000), 'outcome-' || (n % 1000),
  ('{"server": "server-' || (n % 1000) || '"}')::json, 'prev-' || n, 'hash-' || n
FROM generate_series(1, 20000) AS n`

// auditPlanRowsSQLite is auditPlanRows for SQLite, which has no
// generate_series.
const auditPlanRowsSQLite = `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000)
INSERT INTO audit_log (seq, at, kind, principal, tool, outcome, details, prev_hash, hash)
SELECT n, ?1, 'kind-' || (n % 1000), 'iss|t|p-' || (n % 1000), 'tool-' || (n % 1000), 'outcome-' || (n % 1000),
  '{"server": "server-' || (n % 1000) || '"}', 'prev-' || n, 'hash-' || n
FROM g`

// TestAuditQueriesUseIndexes checks, on both engines, that each filter of
// QueryAudit, in either order, is served by its index of migration 00022
// (the server by the index of the details' expression), on a log of
// 20,000 records whose statistics are current. PostgreSQL is asked with
// sequential scans off, as TestSweepsUseIndexes asks it.
func TestAuditQueriesUseIndexes(t *testing.T) {
	at := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	filters := []struct {
		q     AuditQuery
		index string
	}{
		{AuditQuery{Kind: "kind-7"}, "audit_log_kind_idx"},
		{AuditQuery{Principal: "iss|t|p-7"}, "audit_log_principal_idx"},
		{AuditQuery{Tool: "tool-7"}, "audit_log_tool_idx"},
		{AuditQuery{Server: "server-7"}, "audit_log_server_idx"},
		{AuditQuery{Outcome: "outcome-7"}, "audit_log_outcome_idx"},
		{AuditQuery{Kind: "kind-7", Scope: "iss|t|", After: 100}, "audit_log_kind_idx"},
	}
	for _, eng := range []struct {
		name, rows string
		dsn        func(testing.TB) string
		plan       func(t *testing.T, x executor, q stmt, args []any) string
	}{
		{"SQLite", auditPlanRowsSQLite, func(t testing.TB) string { return filepath.Join(t.TempDir(), "usher.db") },
			func(t *testing.T, x executor, q stmt, args []any) string {
				p, err := sqlitePlan(t.Context(), x, q, args)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}},
		{"PostgreSQL", auditPlanRows, ownSchemaPostgresURL, func(t *testing.T, x executor, q stmt, args []any) string {
			p, err := postgresPlan(t.Context(), x, q, args)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(eng.name, func(t *testing.T) {
			c := parityCore(t, parityStore(t, eng.dsn(t)))
			x := executor{q: c.write, lite: eng.name == "SQLite"}
			if _, err := c.write.ExecContext(t.Context(), eng.rows, x.args([]any{at})...); err != nil {
				t.Fatalf("fill the log: %v", err)
			}
			if _, err := c.write.ExecContext(t.Context(), "ANALYZE"); err != nil {
				t.Fatal(err)
			}
			for _, f := range filters {
				for _, desc := range []bool{false, true} {
					q := f.q
					q.Descending, q.Limit = desc, 100
					s, args := auditQuerySQL(q)
					if plan := eng.plan(t, x, s, args); !strings.Contains(plan, f.index) {
						t.Errorf("%+v does not use %s:\n%s", q, f.index, plan)
					}
				}
			}
			q := AuditQuery{Since: at.Add(-time.Hour), Until: at.Add(-time.Minute), Limit: 100}
			s, args := auditQuerySQL(q)
			if plan := eng.plan(t, x, s, args); !strings.Contains(plan, "audit_log_at_idx") {
				t.Errorf("since and until do not use audit_log_at_idx:\n%s", plan)
			}
		})
	}
}
