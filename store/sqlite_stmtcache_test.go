package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// keptStmt is a kept statement as a test sees it.
type keptStmt struct {
	stmt *cachedStmt
	busy bool
}

// openCachingDB opens a SQLite file through the statement cache, on one
// connection, and returns a function that reads that connection's cache.
func openCachingDB(t *testing.T) (*sql.DB, *sql.Conn, func() map[string]keptStmt) {
	t.Helper()
	c, err := newStmtCachingConnector(filepath.Join(t.TempDir(), "cache.db") + "?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cache := func() map[string]keptStmt {
		var out map[string]keptStmt
		conn.Raw(func(dc any) error {
			cc := dc.(*stmtCachingConn)
			cc.mu.Lock()
			defer cc.mu.Unlock()
			out = make(map[string]keptStmt, len(cc.stmts))
			for q, s := range cc.stmts {
				out[q] = keptStmt{stmt: s, busy: s.busy}
			}
			return nil
		})
		return out
	}
	return db, conn, cache
}

func TestSQLiteStmtCacheReuses(t *testing.T) {
	ctx := t.Context()
	_, conn, cache := openCachingDB(t)
	if _, err := conn.ExecContext(ctx, `CREATE TABLE t (k integer PRIMARY KEY, v text)`); err != nil {
		t.Fatal(err)
	}
	const insert, read = `INSERT INTO t (k, v) VALUES (?, ?)`, `SELECT v FROM t WHERE k = ?`
	for k := range 3 {
		if _, err := conn.ExecContext(ctx, insert, k, "v"+string(rune('0'+k))); err != nil {
			t.Fatal(err)
		}
	}
	kept := cache()[insert]
	if kept.stmt == nil || kept.busy {
		t.Fatalf("after three inserts the cache holds %+v for the insert, want a free statement", kept)
	}
	for k := range 3 {
		var v string
		if err := conn.QueryRowContext(ctx, read, k).Scan(&v); err != nil || v != "v"+string(rune('0'+k)) {
			t.Fatalf("read %d = %q, %v", k, v, err)
		}
	}
	// A key that matches nothing, then one that does: the statement is
	// reset between calls.
	if err := conn.QueryRowContext(ctx, read, 99).Scan(new(string)); err != sql.ErrNoRows {
		t.Fatalf("read of a missing key = %v, want sql.ErrNoRows", err)
	}
	var v string
	if err := conn.QueryRowContext(ctx, read, 1).Scan(&v); err != nil || v != "v1" {
		t.Fatalf("read after a miss = %q, %v", v, err)
	}
	if got := cache(); got[insert].stmt != kept.stmt || got[read].stmt == nil || got[read].busy || len(got) != 3 {
		t.Fatalf("cache = %v, want the create, the insert (the same statement) and the read, all free", got)
	}
	// A failing statement stays out of the cache, and the connection works.
	if _, err := conn.ExecContext(ctx, `INSERT INTO missing VALUES (1)`); err == nil {
		t.Fatal("insert into a missing table succeeded")
	}
	if _, ok := cache()[`INSERT INTO missing VALUES (1)`]; ok {
		t.Error("a statement that failed to prepare was kept")
	}
	if _, err := conn.ExecContext(ctx, insert, 1, "dup"); err == nil {
		t.Fatal("a duplicate key was inserted")
	}
	if _, err := conn.ExecContext(ctx, insert, 5, "after the error"); err != nil {
		t.Fatalf("the kept insert after a constraint error: %v", err)
	}
}

// Two rows of one statement open at once (in one transaction): the second
// runs on a statement of its own, and both read what they should.
func TestSQLiteStmtCacheBusy(t *testing.T) {
	ctx := t.Context()
	db, _, _ := openCachingDB(t)
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (k integer PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	for k := range 6 {
		if _, err := db.ExecContext(ctx, `INSERT INTO t (k) VALUES (?)`, k); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const q = `SELECT k FROM t WHERE k >= ? ORDER BY k`
	outer, err := tx.QueryContext(ctx, q, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for outer.Next() {
		var k int
		outer.Scan(&k)
		inner, err := tx.QueryContext(ctx, q, 5)
		if err != nil {
			t.Fatal(err)
		}
		for inner.Next() {
			var j int
			inner.Scan(&j)
			got = append(got, k*10+j)
		}
		if err := inner.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := outer.Close(); err != nil {
		t.Fatal(err)
	}
	if want := []int{35, 45, 55}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("nested reads = %v, want %v", got, want)
	}
	// The kept statement is free again: it serves the next call.
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM (`+q+`)`, 0).Scan(&n); err != nil || n != 6 {
		t.Fatalf("count = %d, %v", n, err)
	}
}

// A kept statement follows the schema: SQLite prepares it anew when a
// migration changed a table it reads.
func TestSQLiteStmtCacheSchemaChange(t *testing.T) {
	ctx := t.Context()
	_, conn, _ := openCachingDB(t)
	for _, q := range []string{`CREATE TABLE t (k integer PRIMARY KEY)`, `INSERT INTO t (k) VALUES (1)`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	const q = `SELECT * FROM t`
	cols := func() []string {
		rows, err := conn.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		c, _ := rows.Columns()
		return c
	}
	if c := cols(); len(c) != 1 {
		t.Fatalf("columns = %v", c)
	}
	if _, err := conn.ExecContext(ctx, `ALTER TABLE t ADD COLUMN v text NOT NULL DEFAULT 'x'`); err != nil {
		t.Fatal(err)
	}
	if c := cols(); len(c) != 2 {
		t.Fatalf("columns after the migration = %v, want k and v", c)
	}
}

// Rows whose context ends are closed by database/sql, and free their
// statement.
func TestSQLiteStmtCacheCancelledRows(t *testing.T) {
	_, conn, cache := openCachingDB(t)
	if _, err := conn.ExecContext(t.Context(), `CREATE TABLE t (k integer PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), `INSERT INTO t (k) VALUES (1), (2), (3)`); err != nil {
		t.Fatal(err)
	}
	const q = `SELECT k FROM t ORDER BY k`
	ctx, cancel := context.WithCancel(t.Context())
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	rows.Next()
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for cache()[q].busy {
		if time.Now().After(deadline) {
			t.Fatal("the rows of a cancelled query did not free their statement")
		}
		time.Sleep(time.Millisecond)
	}
	rows.Close()
	var n int
	if err := conn.QueryRowContext(t.Context(), `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("count after the cancelled read = %d, %v", n, err)
	}
	var k int
	if err := conn.QueryRowContext(t.Context(), q).Scan(&k); err != nil || k != 1 {
		t.Fatalf("the statement after its cancelled read = %d, %v", k, err)
	}
}
