package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// stmt is one SQL statement, written once in PostgreSQL's form and
// translated for SQLite when the package initialises (see sqlite). A
// statement whose text must differ between the engines is built with
// perEngine; one that only PostgreSQL runs (an advisory lock, which
// SQLite's single writer makes moot) with postgresOnly.
type stmt struct {
	pg, lite string
	// pgNotifies: the PostgreSQL text sends the statement's notifications
	// itself (see executor.notifyAfter).
	pgNotifies bool
}

// sql1 writes q once for both engines. q uses PostgreSQL's numbered
// placeholders ($1), and may use its casts (::bigint) and row-locking
// clauses (FOR UPDATE, SKIP LOCKED), which the SQLite form drops.
func sql1(q string) stmt { return stmt{pg: q, lite: sqliteDialect(q)} }

// perEngine names a statement whose text differs between the engines
// beyond what sqliteDialect translates. lite is written in the same
// form as pg (numbered $ placeholders).
func perEngine(pg, lite string) stmt { return stmt{pg: pg, lite: sqliteDialect(lite)} }

// postgresOnly names a statement that SQLite does not run: executing it
// there does nothing.
func postgresOnly(pg string) stmt { return stmt{pg: pg} }

// sqliteDialect translates a statement from PostgreSQL's form to SQLite's:
// $N placeholders become ?N (SQLite numbers ?N as PostgreSQL numbers $N),
// casts (::type) go (SQLite's columns have affinities, not types, and its
// values arrive as the driver binds them), and FOR UPDATE [SKIP LOCKED]
// goes (a SQLite write transaction holds the whole database's lock, so
// every row it reads is locked). Quoted text is left as it is.
func sqliteDialect(q string) string {
	var b strings.Builder
	b.Grow(len(q))
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(q[i+1:], c)
			if j < 0 {
				b.WriteString(q[i:])
				return b.String()
			}
			b.WriteString(q[i : i+j+2])
			i += j + 1
		case c == '$' && i+1 < len(q) && isDigit(q[i+1]):
			b.WriteByte('?')
		case c == ':' && i+1 < len(q) && q[i+1] == ':':
			j := i + 2
			for j < len(q) && (isIdentByte(q[j]) || q[j] == '[' || q[j] == ']') {
				j++
			}
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return rowLocks.ReplaceAllString(b.String(), "")
}

// rowLocks matches PostgreSQL's row-locking clauses.
var rowLocks = regexp.MustCompile(`\s+FOR UPDATE(\s+SKIP LOCKED)?\b`)

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isIdentByte(c byte) bool {
	return c == '_' || isDigit(c) || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// querier is what a pool (*sql.DB) and a transaction (*sql.Tx) both offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// executor runs statements on one engine, on a pool or in a transaction:
// the domain operations are written once over it. Its errors are the
// driver's; the operation's caller translates them (see core.translate).
type executor struct {
	q    querier
	lite bool
	// tx is the transaction's state; nil on a pool.
	tx *txState
}

// text is s's text for the executor's engine.
func (x executor) text(s stmt) string {
	if x.lite {
		return s.lite
	}
	return s.pg
}

// exec runs s and returns how many rows it changed.
func (x executor) exec(ctx context.Context, s stmt, args ...any) (int64, error) {
	q := x.text(s)
	if q == "" {
		return 0, nil
	}
	res, err := x.q.ExecContext(ctx, q, x.args(args)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// query runs s and returns its rows.
func (x executor) query(ctx context.Context, s stmt, args ...any) (*sql.Rows, error) {
	return x.q.QueryContext(ctx, x.text(s), x.args(args)...)
}

// row runs s, which returns at most one row.
func (x executor) row(ctx context.Context, s stmt, args ...any) *sql.Row {
	return x.q.QueryRowContext(ctx, x.text(s), x.args(args)...)
}

// args converts arguments to what the engine stores. On PostgreSQL pgx
// takes Go values as they are. SQLite stores times as fixed-width text
// (sqliteTime), so that text order is time order, JSON as text, and the
// store's named string types as their text; other values go through
// database/sql's own conversion.
func (x executor) args(args []any) []any {
	if !x.lite {
		return args
	}
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case time.Time:
			out[i] = sqliteTime(v)
		case json.RawMessage:
			if v == nil {
				out[i] = nil
			} else {
				out[i] = string(v)
			}
		case string, nil:
			out[i] = a
		default:
			// A named string type (RunStatus, ApprovalStatus, …) as its
			// text.
			if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
				out[i] = rv.String()
			} else {
				out[i] = a
			}
		}
	}
	return out
}

// nullTime is the argument for a nullable time column: NULL for the zero
// time.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return storedTime(t)
}

// timeCol scans a time column on either engine into *t: PostgreSQL's
// timestamptz arrives as a time.Time, SQLite's text as sqliteTime wrote
// it. NULL scans as the zero time, which is how the store represents an
// absent time.
type timeCol struct{ t *time.Time }

// at returns the scan destination of a time column.
func at(t *time.Time) timeCol { return timeCol{t} }

// Scan implements sql.Scanner.
func (c timeCol) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*c.t = time.Time{}
	case time.Time:
		*c.t = v.UTC()
	case string:
		t, err := parseSQLiteTime(v)
		if err != nil {
			return err
		}
		*c.t = t
	case []byte:
		t, err := parseSQLiteTime(string(v))
		if err != nil {
			return err
		}
		*c.t = t
	default:
		return errors.New("store: a time column holds neither a time nor text")
	}
	return nil
}

// rowScanner is what *sql.Row and *sql.Rows share.
type rowScanner interface{ Scan(dest ...any) error }

// queryAll runs s on x and reads every row it returns with scan.
func queryAll[T any](ctx context.Context, x executor, s stmt, scan func(rowScanner) (T, error), args ...any) ([]T, error) {
	rows, err := x.query(ctx, s, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
