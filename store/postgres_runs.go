package store

import "github.com/jackc/pgx/v5"

// What is left of the queue's PostgreSQL half, for postgres.go's reads
// until they are written over the executor too (the queue is in queue.go).

// collectPostgresRuns reads rows of runColumns.
func collectPostgresRuns(rows pgx.Rows) ([]Run, error) {
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanPostgresRun(row) })
	return runs, pgError(err)
}

// scanPostgresEvent reads one row of eventColumns.
func scanPostgresEvent(row pgx.CollectableRow) (Event, error) {
	var e Event
	var payload []byte
	if err := row.Scan(&e.RunID, &e.Seq, &e.Type, &payload, &e.CreatedAt); err != nil {
		return Event{}, err
	}
	e.Payload = payload
	e.CreatedAt = e.CreatedAt.UTC()
	return e, nil
}
