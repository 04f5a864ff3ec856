package store

import "database/sql"

// What is left of the queue's SQLite half, for sqlite.go's reads until
// they are written over the executor too (the queue is in queue.go).

// scanSQLiteRuns reads rows of runColumns and closes them.
func scanSQLiteRuns(rows *sql.Rows) ([]Run, error) {
	defer rows.Close()
	var runs []Run
	for rows.Next() {
		r, err := scanSQLiteRun(rows)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, rows.Err()
}
