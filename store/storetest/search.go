package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
)

// testSearchMessages: a search finds an owner's live runs whose messages
// hold every word of the query, each the start of a word, case folded,
// and gives each run's latest such message; others' runs, deleted ones,
// tool results and agent events are never found; a query without words is
// refused. Both engines answer alike.
func testSearchMessages(t *testing.T, s store.Store) {
	ctx := t.Context()
	msg := func(typ, content string) store.NewEvent {
		p, _ := json.Marshal(map[string]string{"content": content})
		return store.NewEvent{Type: typ, Payload: p}
	}
	open := func(id, owner string, events ...store.NewEvent) {
		t.Helper()
		if _, _, err := s.OpenRun(ctx, store.Run{ID: id, Owner: owner}, 100, nil); err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if _, err := s.AppendEvent(ctx, id, e.Type, e.Payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	open("run-a", queueOwner,
		msg("message.user", "Plan the Quarterly report, please"),
		msg("message.assistant", "The quarterly-report draft is in notes_list."),
		msg("message.tool", "secret quarterly numbers"),
		msg("message.user", "and the offsite in Zürich?"))
	open("run-b", queueOwner, msg("message.user", "groceries: milk, eggs"), msg("agent.note", "quarterly"))
	open("run-c", "issuer|tenant|mallory", msg("message.user", "quarterly report of mallory"))
	open("run-d", queueOwner, msg("message.user", "quarterly report, deleted"))
	if err := s.DeleteRun(ctx, "run-d", nil, store.Withdrawal{}); err != nil {
		t.Fatal(err)
	}

	search := func(q string) []store.MessageMatch {
		t.Helper()
		got, err := s.SearchMessages(ctx, queueOwner, q, 10)
		if err != nil {
			t.Fatalf("SearchMessages(%q) = %v", q, err)
		}
		slices.SortFunc(got, func(a, b store.MessageMatch) int { return strings.Compare(a.RunID, b.RunID) })
		return got
	}
	tests := []struct {
		q    string
		want []store.MessageMatch
	}{
		// The latest matching message of run-a is the assistant's.
		{"quarterly", []store.MessageMatch{{RunID: "run-a", Seq: 2, Content: "The quarterly-report draft is in notes_list."}}},
		{"QUART rep", []store.MessageMatch{{RunID: "run-a", Seq: 2, Content: "The quarterly-report draft is in notes_list."}}},
		{"plan quarterly", []store.MessageMatch{{RunID: "run-a", Seq: 1, Content: "Plan the Quarterly report, please"}}},
		{"notes list", []store.MessageMatch{{RunID: "run-a", Seq: 2, Content: "The quarterly-report draft is in notes_list."}}},
		{"zürich", []store.MessageMatch{{RunID: "run-a", Seq: 4, Content: "and the offsite in Zürich?"}}},
		{"milk", []store.MessageMatch{{RunID: "run-b", Seq: 1, Content: "groceries: milk, eggs"}}},
		{"secret", nil},  // a tool result
		{"arterly", nil}, // not the start of a word
		{"milk quarterly", nil},
		{`"milk" OR 'x' & !(:*`, nil},
		{"mallory", nil}, // someone else's
		{"deleted", nil},
	}
	for _, tt := range tests {
		if got := search(tt.q); !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("SearchMessages(%q) = %+v, want %+v", tt.q, got, tt.want)
		}
	}
	if got := search(`"milk" & (eggs:*)!`); len(got) != 1 || got[0].RunID != "run-b" {
		t.Errorf("a query with operators = %+v, want its words searched as words", got)
	}
	for _, q := range []string{"", "  ", "!!! ???", "*"} {
		if _, err := s.SearchMessages(ctx, queueOwner, q, 10); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SearchMessages(%q) = %v, want ErrInvalid", q, err)
		}
	}
	if _, err := s.SearchMessages(ctx, queueOwner, "milk", store.MaxSearchResults+1); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("SearchMessages over the limit = %v, want ErrInvalid", err)
	}
	if got := store.SearchWords("A b c d e f g h i j " + strings.Repeat("x", 100)); len(got) != store.MaxSearchWords || got[0] != "a" {
		t.Errorf("SearchWords = %q", got)
	}
}
