package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

const (
	pgListNotes = `SELECT ` + noteColumns + ` FROM notes WHERE owner = $1 ORDER BY name`

	pgGetNote = `SELECT ` + noteColumns + ` FROM notes WHERE owner = $1 AND name = $2`

	// pgPutNote creates the note or replaces its body; created_at stays
	// the first write's.
	pgPutNote = `
INSERT INTO notes (owner, name, body, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
ON CONFLICT (owner, name) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
RETURNING ` + noteColumns

	pgDeleteNote = `DELETE FROM notes WHERE owner = $1 AND name = $2`
)

func (s *postgresStore) ListNotes(ctx context.Context, owner string) ([]Note, error) {
	rows, err := s.pool.Query(ctx, pgListNotes, owner)
	if err != nil {
		return nil, pgError(err)
	}
	notes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Note, error) {
		return scanPostgresNote(row)
	})
	if err != nil {
		return nil, pgError(err)
	}
	return notes, nil
}

func (s *postgresStore) GetNote(ctx context.Context, owner, name string) (Note, error) {
	n, err := scanPostgresNote(s.pool.QueryRow(ctx, pgGetNote, owner, name))
	if err != nil {
		return Note{}, pgError(err)
	}
	return n, nil
}

func (s *postgresStore) PutNote(ctx context.Context, n Note) (Note, error) {
	if err := checkNote(n); err != nil {
		return Note{}, err
	}
	out, err := scanPostgresNote(s.pool.QueryRow(ctx, pgPutNote, n.Owner, n.Name, n.Body, storedTime(s.now())))
	if err != nil {
		return Note{}, pgError(err)
	}
	return out, nil
}

func (s *postgresStore) DeleteNote(ctx context.Context, owner, name string) error {
	tag, err := s.pool.Exec(ctx, pgDeleteNote, owner, name)
	if err != nil {
		return pgError(err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// scanPostgresNote reads one row of noteColumns.
func scanPostgresNote(row pgx.Row) (Note, error) {
	var n Note
	if err := row.Scan(&n.Owner, &n.Name, &n.Body, &n.CreatedAt, &n.UpdatedAt); err != nil {
		return Note{}, err
	}
	n.CreatedAt, n.UpdatedAt = n.CreatedAt.UTC(), n.UpdatedAt.UTC()
	return n, nil
}
