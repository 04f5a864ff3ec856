package store

import (
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
