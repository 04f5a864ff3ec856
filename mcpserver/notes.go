package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/usherhq/usher/store"
)

// Notes stores the demo tools' notes, per owner; store.Store implements it.
type Notes interface {
	ListNotes(ctx context.Context, owner string) ([]store.Note, error)
	GetNote(ctx context.Context, owner, name string) (store.Note, error)
	PutNote(ctx context.Context, n store.Note) (store.Note, error)
	DeleteNote(ctx context.Context, owner, name string) error
}

// Bounds of the demo notes.
const (
	maxNoteBody  = 8192
	maxNotesEach = 100
)

// noteName is the form of a note's name; the input schemas state it too.
var noteName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$`)

// noteTools are the demo toolset: a read-only listing and reading, an
// ordinary write and a destructive delete, so that a new user meets an
// unattended call, an approval and a denial under the shipped policy.
func noteTools(notes Notes) []builtinSpec {
	return []builtinSpec{
		builtin(ToolDefinition{
			Name:         "notes_list",
			Title:        "List my notes",
			Description:  "Lists the caller's notes by name, with their sizes and when they last changed.",
			InputSchema:  json.RawMessage(emptyInputSchema),
			OutputSchema: json.RawMessage(notesListOutputSchema),
			Annotations:  json.RawMessage(readOnlyAnnotations),
		}, func(ctx context.Context, c Caller, _ noInput) (notesListOutput, error) {
			list, err := notes.ListNotes(ctx, c.Subject)
			if err != nil {
				return notesListOutput{}, err
			}
			out := notesListOutput{Notes: []noteSummary{}}
			for _, n := range list {
				out.Notes = append(out.Notes, noteSummary{Name: n.Name, Size: utf8.RuneCountInString(n.Body), UpdatedAt: n.UpdatedAt})
			}
			return out, nil
		}),
		builtin(ToolDefinition{
			Name:         "notes_read",
			Title:        "Read a note",
			Description:  "Reads one of the caller's notes by name.",
			InputSchema:  json.RawMessage(noteNameInputSchema),
			OutputSchema: json.RawMessage(noteOutputSchema),
			Annotations:  json.RawMessage(readOnlyAnnotations),
		}, func(ctx context.Context, c Caller, in noteNameInput) (noteOutput, error) {
			n, err := notes.GetNote(ctx, c.Subject, in.Name)
			if errors.Is(err, store.ErrNotFound) {
				return noteOutput{}, toolError("There is no note with this name.")
			}
			if err != nil {
				return noteOutput{}, err
			}
			return noteOutput{Name: n.Name, Body: n.Body, UpdatedAt: n.UpdatedAt}, nil
		}),
		builtin(ToolDefinition{
			Name:         "notes_write",
			Title:        "Write a note",
			Description:  "Creates one of the caller's notes, or replaces its text. A user keeps at most 100 notes.",
			InputSchema:  json.RawMessage(noteWriteInputSchema),
			OutputSchema: json.RawMessage(noteSummarySchema),
			Annotations:  json.RawMessage(`{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":true,"openWorldHint":false}`),
		}, func(ctx context.Context, c Caller, in noteWriteInput) (noteSummary, error) {
			if _, err := notes.GetNote(ctx, c.Subject, in.Name); errors.Is(err, store.ErrNotFound) {
				list, err := notes.ListNotes(ctx, c.Subject)
				if err != nil {
					return noteSummary{}, err
				}
				if len(list) >= maxNotesEach {
					return noteSummary{}, toolError("The caller already has 100 notes: delete one first.")
				}
			} else if err != nil {
				return noteSummary{}, err
			}
			n, err := notes.PutNote(ctx, store.Note{Owner: c.Subject, Name: in.Name, Body: *in.Body})
			if err != nil {
				return noteSummary{}, err
			}
			return noteSummary{Name: n.Name, Size: utf8.RuneCountInString(n.Body), UpdatedAt: n.UpdatedAt}, nil
		}),
		builtin(ToolDefinition{
			Name:         "notes_delete",
			Title:        "Delete a note",
			Description:  "Deletes one of the caller's notes for good.",
			InputSchema:  json.RawMessage(noteNameInputSchema),
			OutputSchema: json.RawMessage(noteDeletedOutputSchema),
			Annotations:  json.RawMessage(`{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":true,"openWorldHint":false}`),
		}, func(ctx context.Context, c Caller, in noteNameInput) (noteDeletedOutput, error) {
			err := notes.DeleteNote(ctx, c.Subject, in.Name)
			if errors.Is(err, store.ErrNotFound) {
				return noteDeletedOutput{}, toolError("There is no note with this name.")
			}
			if err != nil {
				return noteDeletedOutput{}, err
			}
			return noteDeletedOutput{Name: in.Name, Deleted: true}, nil
		}),
	}
}

type noteNameInput struct {
	Name string `json:"name"`
}

func (in noteNameInput) check() error { return checkNoteName(in.Name) }

type noteWriteInput struct {
	Name string  `json:"name"`
	Body *string `json:"body"`
}

func (in noteWriteInput) check() error {
	if err := checkNoteName(in.Name); err != nil {
		return err
	}
	if in.Body == nil {
		return argumentErrorf(`"body" is required.`)
	}
	return checkLength("body", *in.Body, 0, maxNoteBody)
}

func checkNoteName(name string) error {
	if !noteName.MatchString(name) {
		return argumentErrorf(`"name" must be 1 to 64 letters, digits, spaces, '.', '_' or '-', starting with a letter or digit.`)
	}
	return nil
}

type noteSummary struct {
	Name      string    `json:"name"`
	Size      int       `json:"size"`
	UpdatedAt time.Time `json:"updatedAt"`
}

type notesListOutput struct {
	Notes []noteSummary `json:"notes"`
}

type noteOutput struct {
	Name      string    `json:"name"`
	Body      string    `json:"body"`
	UpdatedAt time.Time `json:"updatedAt"`
}

type noteDeletedOutput struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

const noteNameSchema = `{"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$", "description": "The note's name."}`

const noteNameInputSchema = `{
	"type": "object",
	"properties": {"name": ` + noteNameSchema + `},
	"required": ["name"],
	"additionalProperties": false
}`

const noteWriteInputSchema = `{
	"type": "object",
	"properties": {
		"name": ` + noteNameSchema + `,
		"body": {"type": "string", "maxLength": 8192, "description": "The note's text."}
	},
	"required": ["name", "body"],
	"additionalProperties": false
}`

const noteSummarySchema = `{
	"type": "object",
	"properties": {
		"name": {"type": "string"},
		"size": {"type": "integer", "minimum": 0, "description": "The text's length in characters."},
		"updatedAt": {"type": "string", "format": "date-time"}
	},
	"required": ["name", "size", "updatedAt"],
	"additionalProperties": false
}`

const notesListOutputSchema = `{
	"type": "object",
	"properties": {"notes": {"type": "array", "items": ` + noteSummarySchema + `}},
	"required": ["notes"],
	"additionalProperties": false
}`

const noteOutputSchema = `{
	"type": "object",
	"properties": {
		"name": {"type": "string"},
		"body": {"type": "string"},
		"updatedAt": {"type": "string", "format": "date-time"}
	},
	"required": ["name", "body", "updatedAt"],
	"additionalProperties": false
}`

const noteDeletedOutputSchema = `{
	"type": "object",
	"properties": {
		"name": {"type": "string"},
		"deleted": {"type": "boolean", "const": true}
	},
	"required": ["name", "deleted"],
	"additionalProperties": false
}`
