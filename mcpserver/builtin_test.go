package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
)

// storeNote is a note to put in the store.
func storeNote(owner, name, body string) store.Note {
	return store.Note{Owner: owner, Name: name, Body: body}
}

// TestSessionTools checks that the session tools show the caller's runs
// only, and answer another user's run exactly as a missing one.
func TestSessionTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := t.Context()
	for _, r := range []store.Run{
		{ID: "run-a", Owner: alice, Title: "Alice's", Status: store.RunInProgress},
		{ID: "run-b", Owner: bob, Title: "Bob's", Status: store.RunInProgress},
	} {
		if _, err := e.store.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := e.store.AppendEvent(ctx, r.ID, "message.user", json.RawMessage(`{"text":"hello `+r.Owner[len(r.Owner)-3:]+string(rune('0'+i))+`"}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cs := e.connect(alice, "", nil, "")
	list := call(t, cs, "sessions_list", map[string]any{}, nil)
	if !strings.Contains(text(list), `"id":"run-a"`) || strings.Contains(text(list), "run-b") {
		t.Errorf("sessions_list = %s", text(list))
	}
	page := call(t, cs, "session_read", map[string]any{"id": "run-a", "limit": 2}, nil)
	var out sessionReadOutput
	if err := json.Unmarshal([]byte(text(page)), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Events) != 2 || out.NextAfter == nil || *out.NextAfter != 2 || out.Session.Title != "Alice's" {
		t.Errorf("session_read = %s", text(page))
	}
	rest := call(t, cs, "session_read", map[string]any{"id": "run-a", "after": 2}, nil)
	if !strings.Contains(text(rest), "hello ice2") || strings.Contains(text(rest), "nextAfter") {
		t.Errorf("second page = %s", text(rest))
	}
	missing := call(t, cs, "session_read", map[string]any{"id": "run-zzz"}, nil)
	others := call(t, cs, "session_read", map[string]any{"id": "run-b"}, nil)
	if !others.IsError || text(others) != text(missing) {
		t.Errorf("another user's run = %q, a missing run = %q", text(others), text(missing))
	}
}

// TestNotesTools exercises the demo tools under a policy that allows them.
func TestNotesTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{rules: map[string]Decision{
		"notes_list": Allow, "notes_read": Allow, "notes_write": Allow, "notes_delete": Allow,
	}})
	cs := e.connect(alice, "", nil, "")
	if res := call(t, cs, "notes_write", map[string]any{"name": "groceries", "body": "milk, eggs"}, nil); res.IsError {
		t.Fatal(text(res))
	}
	if got := text(call(t, cs, "notes_read", map[string]any{"name": "groceries"}, nil)); !strings.Contains(got, `"body":"milk, eggs"`) {
		t.Errorf("notes_read = %s", got)
	}
	if got := text(call(t, cs, "notes_list", map[string]any{}, nil)); !strings.Contains(got, `"name":"groceries","size":10`) {
		t.Errorf("notes_list = %s", got)
	}
	if res := call(t, e.connect(bob, "", nil, ""), "notes_read", map[string]any{"name": "groceries"}, nil); !res.IsError {
		t.Errorf("bob read alice's note: %s", text(res))
	}
	if res := call(t, cs, "notes_delete", map[string]any{"name": "groceries"}, nil); res.IsError {
		t.Fatal(text(res))
	}
	if res := call(t, cs, "notes_read", map[string]any{"name": "groceries"}, nil); !res.IsError || text(res) != "There is no note with this name." {
		t.Errorf("read after delete = %s", text(res))
	}
}

// TestApprovalsList checks that approvals_list shows the caller's pending
// approvals only.
func TestApprovalsList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	cs := e.connect(alice, "", nil, "")
	id := approvalMeta(t, call(t, cs, "notes_write", map[string]any{"name": "n", "body": "b"}, nil))["id"]
	got := text(call(t, cs, "approvals_list", map[string]any{}, nil))
	if !strings.Contains(got, `"id":"`+id+`"`) || !strings.Contains(got, `"arguments":{"body":"b","name":"n"}`) {
		t.Errorf("alice's approvals = %s", got)
	}
	if got := text(call(t, e.connect(bob, "", nil, ""), "approvals_list", map[string]any{}, nil)); got != `{"approvals":[]}` {
		t.Errorf("bob's approvals = %s", got)
	}
}

// TestBuiltinSchemas checks that every built-in tool states a precise
// contract: an object input that admits no other properties, bounded
// strings, an output schema and annotations.
func TestBuiltinSchemas(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	defs := definitions(t, e.catalog)
	if len(defs) != 7 {
		t.Fatalf("%d tools", len(defs))
	}
	for name, d := range defs {
		var in struct {
			Type                 string                     `json:"type"`
			AdditionalProperties *bool                      `json:"additionalProperties"`
			Properties           map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(d.InputSchema, &in); err != nil || in.Type != "object" || in.AdditionalProperties == nil || *in.AdditionalProperties {
			t.Errorf("%s: input schema %s", name, d.InputSchema)
		}
		for p, raw := range in.Properties {
			var prop struct {
				Type      string `json:"type"`
				MaxLength *int   `json:"maxLength"`
			}
			if err := json.Unmarshal(raw, &prop); err != nil || (prop.Type == "string" && prop.MaxLength == nil) {
				t.Errorf("%s: property %s is an unbounded string", name, p)
			}
		}
		if !json.Valid(d.OutputSchema) || !json.Valid(d.Annotations) || d.Title == "" || d.Description == "" {
			t.Errorf("%s: incomplete definition", name)
		}
	}
}
