package storetest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/usherhq/usher/store"
)

func testNotes(t *testing.T, s store.Store) {
	ctx := t.Context()
	put := func(n store.Note) store.Note {
		t.Helper()
		out, err := s.PutNote(ctx, n)
		if err != nil {
			t.Fatalf("PutNote(%s/%s): %v", n.Owner, n.Name, err)
		}
		return out
	}
	todo := put(store.Note{Owner: "alice", Name: "todo", Body: "milk"})
	if todo.Owner != "alice" || todo.Name != "todo" || todo.Body != "milk" || todo.UpdatedAt != todo.CreatedAt {
		t.Errorf("PutNote returned %+v", todo)
	}
	checkStoreTime(t, "Note.CreatedAt", todo.CreatedAt)
	ideas := put(store.Note{Owner: "alice", Name: "ideas", Body: "héllo ☃\nline two"})
	put(store.Note{Owner: "bob", Name: "todo", Body: "bob's"})

	updated := put(store.Note{Owner: "alice", Name: "todo", Body: "milk, eggs"})
	if updated.Body != "milk, eggs" || updated.CreatedAt != todo.CreatedAt || updated.UpdatedAt.Before(todo.UpdatedAt) {
		t.Errorf("PutNote over a note = %+v, want the new body, the first CreatedAt %v", updated, todo.CreatedAt)
	}
	if got, err := s.GetNote(ctx, "alice", "todo"); err != nil || got != updated {
		t.Errorf("GetNote = %+v, %v; want %+v", got, err, updated)
	}
	if got, err := s.ListNotes(ctx, "alice"); err != nil || !reflect.DeepEqual(got, []store.Note{ideas, updated}) {
		t.Errorf("ListNotes(alice) = %+v, %v; want ideas then todo", got, err)
	}
	if got, err := s.GetNote(ctx, "bob", "ideas"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetNote of another owner's name = %+v, %v; want ErrNotFound", got, err)
	}

	if err := s.DeleteNote(ctx, "alice", "todo"); err != nil {
		t.Fatalf("DeleteNote: %v", err)
	}
	if err := s.DeleteNote(ctx, "alice", "todo"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteNote again = %v, want ErrNotFound", err)
	}
	if _, err := s.GetNote(ctx, "alice", "todo"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetNote after DeleteNote = %v, want ErrNotFound", err)
	}
	if got, err := s.GetNote(ctx, "bob", "todo"); err != nil || got.Body != "bob's" {
		t.Errorf("bob's note after alice deleted hers = %+v, %v", got, err)
	}
	if got, err := s.ListNotes(ctx, "carol"); err != nil || len(got) != 0 {
		t.Errorf("ListNotes(carol) = %+v, %v; want none", got, err)
	}

	for name, n := range map[string]store.Note{
		"no owner":         {Name: "n"},
		"no name":          {Owner: "alice"},
		"NUL in the body":  {Owner: "alice", Name: "n", Body: "a\x00b"},
		"body not UTF-8":   {Owner: "alice", Name: "n", Body: "\xc3"},
		"NUL in the name":  {Owner: "alice", Name: "n\x00"},
		"owner not UTF-8":  {Owner: "\xff", Name: "n"},
		"name not UTF-8 2": {Owner: "alice", Name: "\xed\xa0\x80"}, // an encoded surrogate
	} {
		if _, err := s.PutNote(ctx, n); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutNote %s = %v, want ErrInvalid", name, err)
		}
	}
}
