package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"
)

// principalTables are the rows ExportPrincipal reads of a person, $1,
// table by table, in this order: what ErasePrincipal erases, and the
// audit log's records that name them, which it keeps.
var principalTables = []struct {
	table string
	query stmt
}{
	{"runs", sql1(`SELECT * FROM runs WHERE owner = $1 ORDER BY created_at, id`)},
	{"run_events", sql1(`SELECT * FROM run_events WHERE run_id IN (SELECT id FROM runs WHERE owner = $1) ORDER BY run_id, seq`)},
	{"run_message_keys", sql1(`SELECT * FROM run_message_keys WHERE run_id IN (SELECT id FROM runs WHERE owner = $1) ORDER BY run_id, seq`)},
	{"run_branches", sql1(`SELECT * FROM run_branches WHERE run_id IN (SELECT id FROM runs WHERE owner = $1) ORDER BY run_id, branch`)},
	{"run_branch_lines", sql1(`SELECT * FROM run_branch_lines WHERE run_id IN (SELECT id FROM runs WHERE owner = $1) ORDER BY run_id, branch, member`)},
	{"context_snapshots", sql1(`SELECT * FROM context_snapshots WHERE run_id IN (SELECT id FROM runs WHERE owner = $1) ORDER BY run_id, version`)},
	{"run_steps", sql1(`SELECT * FROM run_steps WHERE run_id IN (SELECT id FROM runs WHERE owner = $1) ORDER BY run_id, sequence`)},
	{"run_pins", sql1(`SELECT * FROM run_pins WHERE principal = $1 ORDER BY run_id`)},
	{"approvals", sql1(`SELECT * FROM approvals WHERE principal = $1 OR run_id IN (SELECT id FROM runs WHERE owner = $1) ORDER BY created_at, id`)},
	{"tool_executions", sql1(`SELECT * FROM tool_executions WHERE principal = $1 OR run_id IN (SELECT id FROM runs WHERE owner = $1) ORDER BY started_at, idempotency_key`)},
	{"notes", sql1(`SELECT * FROM notes WHERE owner = $1 ORDER BY name`)},
	{"attachments", sql1(`SELECT * FROM attachments WHERE owner = $1 ORDER BY created_at, id`)},
	{"attachment_contents", sql1(`SELECT * FROM attachment_contents WHERE owner = $1 ORDER BY sha256`)},
	{"user_settings", sql1(`SELECT * FROM user_settings WHERE principal = $1`)},
	{"model_usage", sql1(`SELECT * FROM model_usage WHERE principal = $1 ORDER BY day, model, purpose`)},
	{"browser_sessions", sql1(`SELECT * FROM browser_sessions WHERE principal = $1 ORDER BY created_at`)},
	{"oauth_codes", sql1(`SELECT * FROM oauth_codes WHERE principal = $1 ORDER BY created_at`)},
	{"oauth_refresh_tokens", sql1(`SELECT * FROM oauth_refresh_tokens WHERE principal = $1 ORDER BY created_at`)},
	{"oauth_consents", sql1(`SELECT * FROM oauth_consents WHERE principal = $1 ORDER BY client_id`)},
	{"mcp_sessions", sql1(`SELECT * FROM mcp_sessions WHERE principal = $1 ORDER BY created_at`)},
	{"legal_holds", sql1(`SELECT * FROM legal_holds WHERE principal = $1`)},
	{"audit_log", sql1(`SELECT * FROM audit_log WHERE principal = $1 ORDER BY seq`)},
}

// ExportPrincipal reads everything Usher keeps of the person principal —
// the rows ErasePrincipal would erase, and the audit log's records that
// name them — in one read-only transaction (one snapshot of the
// database), and gives each row to row, table by table, as its columns'
// values: JSON columns as JSON, other text as it is, times in RFC 3339,
// other bytes in base64. An error from row ends the export with it. ErrInvalid for an
// empty principal.
func (c *core) ExportPrincipal(ctx context.Context, principal string, row func(table string, columns map[string]any) error) error {
	if principal == "" {
		return c.fail(invalid(errors.New("export: the principal is empty")))
	}
	opts := &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}
	if c.lite {
		opts = &sql.TxOptions{ReadOnly: true} // a SQLite read transaction is a snapshot
	}
	tx, err := c.read.BeginTx(ctx, opts)
	if err != nil {
		return c.fail(err)
	}
	defer tx.Rollback()
	x := executor{q: tx, lite: c.lite}
	for _, t := range principalTables {
		if err := exportRows(ctx, x, t.table, t.query, principal, row); err != nil {
			return c.fail(err)
		}
	}
	return nil
}

// exportRows gives each row of q to row, as ExportPrincipal describes.
func exportRows(ctx context.Context, x executor, table string, q stmt, principal string, row func(string, map[string]any) error) error {
	rows, err := x.query(ctx, q, principal)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		out := make(map[string]any, len(cols))
		for i, col := range cols {
			out[col] = exportValue(vals[i], jsonColumns[table+"."+col])
		}
		if err := row(table, out); err != nil {
			return err
		}
	}
	return rows.Err()
}

// jsonColumns are the columns of principalTables that hold JSON
// (PostgreSQL's json and jsonb; SQLite keeps them as text), by
// "table.column": an export gives their values as JSON. Every other text,
// a message's or a file's that looks like JSON included, is given as the
// string it is, so that it comes back exactly as stored.
var jsonColumns = map[string]bool{
	"runs.metadata":                true,
	"run_events.payload":           true,
	"approvals.arguments":          true,
	"approvals.policy_ids":         true,
	"approvals.approvers":          true,
	"tool_executions.result":       true,
	"oauth_codes.subject":          true,
	"oauth_refresh_tokens.subject": true,
	"audit_log.policy_ids":         true,
	"audit_log.details":            true,
}

// exportValue is a column's value as an export gives it: a JSON column's
// as JSON, other text as a string, other bytes in base64, times in RFC
// 3339.
func exportValue(v any, isJSON bool) any {
	switch v := v.(type) {
	case []byte:
		if isJSON && json.Valid(v) {
			return json.RawMessage(v)
		}
		if utf8.Valid(v) {
			return string(v)
		}
		return map[string]string{"base64": base64.StdEncoding.EncodeToString(v)}
	case string:
		if isJSON && json.Valid([]byte(v)) {
			return json.RawMessage(v)
		}
		return v
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	}
	return v
}
