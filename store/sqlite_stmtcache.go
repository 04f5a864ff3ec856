package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"

	"modernc.org/sqlite"
)

// The SQLite engine parses a statement each time database/sql runs one,
// unless it is prepared: a connection that prepares every statement once
// and keeps it spares the parse (and the plan) of every later call. SQLite
// prepares anew by itself a kept statement whose schema changed.

// sqliteStmtCacheSize bounds the statements one connection keeps. The
// store runs fewer distinct statements; beyond the bound, a statement is
// parsed for each call as without the cache.
const sqliteStmtCacheSize = 256

// stmtCachingConnector opens SQLite connections that keep their prepared
// statements.
type stmtCachingConnector struct{ driver.Connector }

// newStmtCachingConnector returns a connector for sql.OpenDB on the SQLite
// DSN dsn.
func newStmtCachingConnector(dsn string) (driver.Connector, error) {
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return stmtCachingConnector{c}, nil
}

func (c stmtCachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	inner, ok := conn.(sqliteConn)
	if !ok {
		conn.Close()
		return nil, errors.New("store: the SQLite driver's connection lacks an interface the statement cache needs")
	}
	return &stmtCachingConn{sqliteConn: inner, stmts: map[string]*cachedStmt{}}, nil
}

// sqliteConn is what the SQLite driver's connections implement and
// database/sql uses; stmtCachingConn forwards all of it, as the driver asks
// of a wrapper.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// sqliteStmt is what the SQLite driver's statements implement.
type sqliteStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// stmtCachingConn is a SQLite connection that keeps the statements it
// runs, by their text. database/sql uses a connection from one goroutine
// at a time, but rows may be closed from another (when their context
// ends), hence the mutex.
type stmtCachingConn struct {
	sqliteConn
	mu    sync.Mutex
	stmts map[string]*cachedStmt
}

// cachedStmt is a kept statement; busy while rows read from it.
type cachedStmt struct {
	sqliteStmt
	busy bool
}

// Unwrap returns the driver's connection, for the driver's functions that
// need it.
func (c *stmtCachingConn) Unwrap() driver.Conn { return c.sqliteConn }

// take returns the kept statement for query, prepared now if need be, and
// marks it busy; nil when it is busy already (rows of an earlier call are
// still open) or the cache is full.
func (c *stmtCachingConn) take(ctx context.Context, query string) (*cachedStmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.stmts[query]
	switch {
	case ok && s.busy:
		return nil, nil
	case ok:
		s.busy = true
		return s, nil
	case len(c.stmts) >= sqliteStmtCacheSize:
		return nil, nil
	}
	ds, err := c.sqliteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	st, ok := ds.(sqliteStmt)
	if !ok {
		ds.Close()
		return nil, nil
	}
	s = &cachedStmt{sqliteStmt: st, busy: true}
	c.stmts[query] = s
	return s, nil
}

// give marks s free again.
func (c *stmtCachingConn) give(s *cachedStmt) {
	c.mu.Lock()
	s.busy = false
	c.mu.Unlock()
}

func (c *stmtCachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	s, err := c.take(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.sqliteConn.ExecContext(ctx, query, args)
	}
	defer c.give(s)
	return s.ExecContext(ctx, args)
}

func (c *stmtCachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	s, err := c.take(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	rows, err := s.QueryContext(ctx, args)
	if err != nil {
		c.give(s)
		return nil, err
	}
	if r, ok := rows.(sqliteRows); ok {
		return &cachedRows{sqliteRows: r, conn: c, stmt: s}, nil
	}
	return &cachedPlainRows{Rows: rows, conn: c, stmt: s}, nil
}

// Close finalises the kept statements, then closes the connection.
func (c *stmtCachingConn) Close() error {
	c.mu.Lock()
	var errs []error
	for q, s := range c.stmts {
		errs = append(errs, s.Close())
		delete(c.stmts, q)
	}
	c.mu.Unlock()
	return errors.Join(append(errs, c.sqliteConn.Close())...)
}

// sqliteRows is what the SQLite driver's rows implement; cachedRows
// forwards all of it.
type sqliteRows interface {
	driver.Rows
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeLength
	driver.RowsColumnTypeNullable
	driver.RowsColumnTypePrecisionScale
	driver.RowsColumnTypeScanType
}

// cachedRows are rows of a kept statement, which they free when closed.
type cachedRows struct {
	sqliteRows
	conn *stmtCachingConn
	stmt *cachedStmt
	once sync.Once
}

func (r *cachedRows) Close() error {
	err := r.sqliteRows.Close()
	r.once.Do(func() { r.conn.give(r.stmt) })
	return err
}

// cachedPlainRows are cachedRows for rows that implement no more than
// driver.Rows.
type cachedPlainRows struct {
	driver.Rows
	conn *stmtCachingConn
	stmt *cachedStmt
	once sync.Once
}

func (r *cachedPlainRows) Close() error {
	err := r.Rows.Close()
	r.once.Do(func() { r.conn.give(r.stmt) })
	return err
}
