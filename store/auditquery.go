package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxAuditQueryLimit is the most records one QueryAudit returns.
const MaxAuditQueryLimit = 1000

// AuditQuerier reads the audit log by what its records hold: the reading
// side of a reviewer's audit API. Every filter it offers is served by an
// index on both engines (migration 00022).
type AuditQuerier interface {
	// QueryAudit returns up to q.Limit records that match q, by Seq,
	// ascending or (q.Descending) descending. ErrInvalid when q is not
	// valid (see AuditQuery).
	QueryAudit(ctx context.Context, q AuditQuery) ([]AuditRecord, error)
}

// AuditQuery selects audit records. A zero field does not filter.
type AuditQuery struct {
	// Scope keeps the records whose Principal starts with it, and those
	// with no principal (such as a failed sign-in): a tenant's records,
	// with Scope "issuer|tenant|".
	Scope string
	// Kind, Principal, Tool, Server and Outcome keep the records whose
	// field is exactly this; Server is the "server" member of Details.
	Kind, Principal, Tool, Server, Outcome string
	// Since keeps the records at or after it; Until those before it.
	Since, Until time.Time
	// After keeps the records with Seq > After; Before (when not 0)
	// those with Seq < Before.
	After, Before int64
	// Descending returns the newest records first.
	Descending bool
	// Limit is how many records to return at most: 1 to
	// MaxAuditQueryLimit.
	Limit int
}

// validate reports what is wrong with q.
func (q AuditQuery) validate() error {
	var errs []error
	if q.Limit < 1 || q.Limit > MaxAuditQueryLimit {
		errs = append(errs, fmt.Errorf("limit is %d, want 1 to %d", q.Limit, MaxAuditQueryLimit))
	}
	if q.After < 0 || q.Before < 0 {
		errs = append(errs, fmt.Errorf("after %d and before %d must not be negative", q.After, q.Before))
	}
	for _, f := range [...]struct{ name, value string }{
		{"scope", q.Scope}, {"kind", q.Kind}, {"principal", q.Principal}, {"tool", q.Tool},
		{"server", q.Server}, {"outcome", q.Outcome},
	} {
		if err := checkText("audit query "+f.name, f.value); err != nil {
			errs = append(errs, err)
		}
	}
	if !q.Since.IsZero() {
		errs = append(errs, checkTime("audit query since", q.Since))
	}
	if !q.Until.IsZero() {
		errs = append(errs, checkTime("audit query until", q.Until))
	}
	return invalid(errs...)
}

// auditFilters are the equality filters of an AuditQuery: the SQL each
// compares with its value. The expressions are those of migration 00022's
// indexes, which a plan matches only when written the same way.
func auditFilters(q AuditQuery) []struct{ expr, value string } {
	return []struct{ expr, value string }{
		{"kind", q.Kind}, {"principal", q.Principal}, {"tool", q.Tool},
		{"details ->> 'server'", q.Server}, {"outcome", q.Outcome},
	}
}

// auditQuerySQL is the statement of q and its arguments: one text per
// combination of filters, so that each plan can use the filter's index.
func auditQuerySQL(q AuditQuery) (stmt, []any) {
	var b strings.Builder
	args := []any{q.After}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	b.WriteString(`SELECT ` + auditColumns + ` FROM audit_log WHERE seq > $1`)
	if q.Before > 0 {
		b.WriteString(` AND seq < ` + arg(q.Before))
	}
	if q.Scope != "" {
		p := arg(q.Scope)
		b.WriteString(` AND (principal = '' OR substr(principal, 1, length(` + p + `::text)) = ` + p + `::text)`)
	}
	for _, f := range auditFilters(q) {
		if f.value != "" {
			b.WriteString(` AND ` + f.expr + ` = ` + arg(f.value))
		}
	}
	if !q.Since.IsZero() {
		b.WriteString(` AND at >= ` + arg(q.Since))
	}
	if !q.Until.IsZero() {
		b.WriteString(` AND at < ` + arg(q.Until))
	}
	b.WriteString(` ORDER BY seq`)
	if q.Descending {
		b.WriteString(` DESC`)
	}
	b.WriteString(` LIMIT ` + arg(q.Limit))
	return sql1(b.String()), args
}

func (c *core) QueryAudit(ctx context.Context, q AuditQuery) ([]AuditRecord, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	s, args := auditQuerySQL(q)
	out, err := queryAll(ctx, c.reader(), s, scanAudit, args...)
	return out, c.fail(err)
}
