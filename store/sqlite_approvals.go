package store

import (
	"context"
	"database/sql"
)

// execCount runs a write and returns how many rows it changed. Only the
// browser sessions' SQLite code (sqlite_sessions.go) still uses it; it
// goes with them once they are written over the executor.
func (s *sqliteStore) execCount(ctx context.Context, query string, args ...any) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, sqliteError(err)
	}
	return int(n), nil
}
