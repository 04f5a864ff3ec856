package store

import (
	"context"
	"database/sql"
)

const (
	sqliteListNotes = `SELECT ` + noteColumns + ` FROM notes WHERE owner = ? ORDER BY name`

	sqliteGetNote = `SELECT ` + noteColumns + ` FROM notes WHERE owner = ? AND name = ?`

	// sqlitePutNote creates the note or replaces its body; created_at
	// stays the first write's.
	sqlitePutNote = `
INSERT INTO notes (owner, name, body, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)
ON CONFLICT (owner, name) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
RETURNING ` + noteColumns

	sqliteDeleteNote = `DELETE FROM notes WHERE owner = ? AND name = ?`
)

func (s *sqliteStore) ListNotes(ctx context.Context, owner string) ([]Note, error) {
	rows, err := s.read.QueryContext(ctx, sqliteListNotes, owner)
	if err != nil {
		return nil, sqliteError(err)
	}
	defer rows.Close()
	var notes []Note
	for rows.Next() {
		n, err := scanSQLiteNote(rows)
		if err != nil {
			return nil, sqliteError(err)
		}
		notes = append(notes, n)
	}
	if err := rows.Err(); err != nil {
		return nil, sqliteError(err)
	}
	return notes, nil
}

func (s *sqliteStore) GetNote(ctx context.Context, owner, name string) (Note, error) {
	n, err := scanSQLiteNote(s.read.QueryRowContext(ctx, sqliteGetNote, owner, name))
	if err != nil {
		return Note{}, sqliteError(err)
	}
	return n, nil
}

func (s *sqliteStore) PutNote(ctx context.Context, n Note) (Note, error) {
	if err := checkNote(n); err != nil {
		return Note{}, err
	}
	var out Note
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanSQLiteNote(tx.QueryRowContext(ctx, sqlitePutNote, n.Owner, n.Name, n.Body, sqliteTime(s.now())))
		return err
	})
	if err != nil {
		return Note{}, sqliteError(err)
	}
	return out, nil
}

func (s *sqliteStore) DeleteNote(ctx context.Context, owner, name string) error {
	n, err := s.execCount(ctx, sqliteDeleteNote, owner, name)
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// scanSQLiteNote reads one row of noteColumns.
func scanSQLiteNote(row interface{ Scan(...any) error }) (Note, error) {
	var n Note
	var createdAt, updatedAt string
	if err := row.Scan(&n.Owner, &n.Name, &n.Body, &createdAt, &updatedAt); err != nil {
		return Note{}, err
	}
	var tp sqliteTimeParser
	n.CreatedAt = tp.parse(createdAt)
	n.UpdatedAt = tp.parse(updatedAt)
	return n, tp.err
}
