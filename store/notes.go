package store

import (
	"context"
	"errors"
	"time"
)

// Note is a note of the demo toolset: a named text, private to its owner.
type Note struct {
	Owner     string // the principal id
	Name      string // unique per owner
	Body      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// noteColumns is the column list of a Note, in field order.
const noteColumns = `owner, name, body, created_at, updated_at`

// checkNote validates a note PutNote writes.
func checkNote(n Note) error {
	var errs []error
	if n.Owner == "" {
		errs = append(errs, errors.New("note owner is empty"))
	}
	if n.Name == "" {
		errs = append(errs, errors.New("note name is empty"))
	}
	errs = append(errs,
		checkText("note owner", n.Owner),
		checkText("note name", n.Name),
		checkText("note body", n.Body))
	return invalid(errs...)
}

var (
	listNotes = sql1(`SELECT ` + noteColumns + ` FROM notes WHERE owner = $1 ORDER BY name`)

	getNote = sql1(`SELECT ` + noteColumns + ` FROM notes WHERE owner = $1 AND name = $2`)

	// putNote creates the note or replaces its body; created_at stays the
	// first write's.
	putNote = sql1(`
INSERT INTO notes (owner, name, body, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
ON CONFLICT (owner, name) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
RETURNING ` + noteColumns)

	deleteNote = sql1(`DELETE FROM notes WHERE owner = $1 AND name = $2`)
)

func (c *core) ListNotes(ctx context.Context, owner string) ([]Note, error) {
	notes, err := queryAll(ctx, c.reader(), listNotes, scanNote, owner)
	return notes, c.fail(err)
}

func (c *core) GetNote(ctx context.Context, owner, name string) (Note, error) {
	n, err := scanNote(c.reader().row(ctx, getNote, owner, name))
	return n, c.fail(err)
}

func (c *core) PutNote(ctx context.Context, n Note) (Note, error) {
	if err := checkNote(n); err != nil {
		return Note{}, err
	}
	var out Note
	err := c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanNote(x.row(ctx, putNote, n.Owner, n.Name, n.Body, storedTime(c.now())))
		return err
	})
	return out, c.fail(err)
}

func (c *core) DeleteNote(ctx context.Context, owner, name string) error {
	return c.fail(c.writeOne(ctx, func(x executor) error {
		n, err := x.exec(ctx, deleteNote, owner, name)
		if err == nil && n == 0 {
			err = ErrNotFound
		}
		return err
	}))
}

// scanNote reads one row of noteColumns.
func scanNote(row rowScanner) (Note, error) {
	var n Note
	err := row.Scan(&n.Owner, &n.Name, &n.Body, at(&n.CreatedAt), at(&n.UpdatedAt))
	return n, err
}
