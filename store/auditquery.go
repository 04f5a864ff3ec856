package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
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
	// EachAudit calls fn with each record QueryAudit would return, in
	// its order, as each is read: a caller that writes the records out
	// does so while the next ones are still arriving. An error of fn
	// ends the reading and is returned as it is.
	EachAudit(ctx context.Context, q AuditQuery, fn func(AuditRecord) error) error
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
	// Since keeps the records at or after it; Until those before it, to
	// the nanosecond (a record's time is kept to the microsecond).
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
// Each text is written (and translated for SQLite) once, then kept: a
// reviewer's page is otherwise paying for it on every request.
func auditQuerySQL(q AuditQuery) (stmt, []any) {
	args := make([]any, 1, 12)
	args[0] = q.After
	shape := auditShape(0)
	if q.Before > 0 {
		shape |= auditBefore
		args = append(args, q.Before)
	}
	if q.Scope != "" {
		shape |= auditScope
		args = append(args, q.Scope)
	}
	for i, f := range auditFilters(q) {
		if f.value != "" {
			shape |= auditKind << i
			args = append(args, f.value)
		}
	}
	if !q.Since.IsZero() {
		shape |= auditSince
		args = append(args, boundTime(q.Since))
	}
	if !q.Until.IsZero() {
		shape |= auditUntil
		args = append(args, boundTime(q.Until))
	}
	if q.Descending {
		shape |= auditDesc
	}
	args = append(args, q.Limit)
	if s := auditStmts[shape].Load(); s != nil {
		return *s, args
	}
	s := auditShapeSQL(shape)
	auditStmts[shape].Store(&s)
	return s, args
}

// auditShape is which parts an AuditQuery's statement has: one bit for
// each, the equality filters in auditFilters' order from auditKind.
type auditShape uint16

const (
	auditBefore auditShape = 1 << iota
	auditScope
	auditKind // then principal, tool, server and outcome
	_
	_
	_
	_
	auditSince
	auditUntil
	auditDesc
	auditShapes // how many shapes there are
)

// auditStmts are the statements written so far, by shape.
var auditStmts [auditShapes]atomic.Pointer[stmt]

// auditShapeSQL writes the statement of a shape; its parameters are in
// the order auditQuerySQL appends their arguments.
func auditShapeSQL(shape auditShape) stmt {
	var b strings.Builder
	n := 1
	arg := func() string {
		n++
		return "$" + strconv.Itoa(n)
	}
	b.WriteString(`SELECT ` + auditColumns + ` FROM audit_log WHERE seq > $1`)
	if shape&auditBefore != 0 {
		b.WriteString(` AND seq < ` + arg())
	}
	if shape&auditScope != 0 {
		p := arg()
		b.WriteString(` AND (principal = '' OR substr(principal, 1, length(` + p + `::text)) = ` + p + `::text)`)
	}
	for i, f := range auditFilters(AuditQuery{}) {
		if shape&(auditKind<<i) != 0 {
			b.WriteString(` AND ` + f.expr + ` = ` + arg())
		}
	}
	if shape&auditSince != 0 {
		b.WriteString(` AND at >= ` + arg())
	}
	if shape&auditUntil != 0 {
		b.WriteString(` AND at < ` + arg())
	}
	b.WriteString(` ORDER BY seq`)
	if shape&auditDesc != 0 {
		b.WriteString(` DESC`)
	}
	b.WriteString(` LIMIT ` + arg())
	return sql1(b.String())
}

func (c *core) QueryAudit(ctx context.Context, q AuditQuery) ([]AuditRecord, error) {
	return collectAudit(ctx, c, q)
}

func (c *core) EachAudit(ctx context.Context, q AuditQuery, fn func(AuditRecord) error) error {
	if err := q.validate(); err != nil {
		return err
	}
	s, args := auditQuerySQL(q)
	rows, err := c.reader().query(ctx, s, args...)
	if err != nil {
		return c.fail(err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanAudit(rows)
		if err != nil {
			return c.fail(err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return c.fail(rows.Err())
}

// collectAudit is QueryAudit by EachAudit.
func collectAudit(ctx context.Context, a AuditQuerier, q AuditQuery) ([]AuditRecord, error) {
	var out []AuditRecord
	err := a.EachAudit(ctx, q, func(r AuditRecord) error {
		if out == nil {
			out = make([]AuditRecord, 0, min(q.Limit, 128))
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
