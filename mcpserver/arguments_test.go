package mcpserver

import (
	"reflect"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
)

// TestCaseFoldedNamesRefused checks that arguments holding two names equal
// under Unicode case folding ("sql" and "ſql", U+017F) are refused before
// the policy is asked, at any depth, with a tool error the caller can read
// and an audit record of the refusal, and that nothing runs.
func TestCaseFoldedNamesRefused(t *testing.T) {
	t.Parallel()
	up := newFixture(t)
	e := newEnv(t, envConfig{
		rules:     map[string]Decision{"fx__echo": Allow, "notes_read": Allow},
		upstreams: []Upstream{{Name: "fx", URL: up.url}},
	})
	cs := e.connect(alice, "", nil, "")
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
	}{
		{"top level", "fx__echo", map[string]any{"sql": "SELECT 1", "ſql": "DROP TABLE users"}},
		{"ascii case", "fx__echo", map[string]any{"text": "a", "TEXT": "b"}},
		{"nested", "fx__echo", map[string]any{"text": "x", "q": map[string]any{"sql": "SELECT 1", "ſql": "DROP TABLE users"}}},
		{"object in an array", "fx__echo", map[string]any{"text": "x", "q": []any{1, map[string]any{"k": 1, "\u212a": 2}}}},
		{"built-in tool", "notes_read", map[string]any{"name": "a", "NAME": "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, cs, tc.tool, tc.args, nil)
			if !res.IsError || !strings.Contains(text(res), "differ only in letter case") {
				t.Errorf("result = %s, want the names refused", text(res))
			}
		})
	}
	if calls := e.policy.calls(); len(calls) != 0 {
		t.Errorf("the policy was asked about %d calls with colliding names", len(calls))
	}
	if n := up.called("echo"); n != 0 {
		t.Errorf("the upstream tool ran %d times", n)
	}
	want := []string{KindInvalidArguments, KindInvalidArguments, KindInvalidArguments, KindInvalidArguments}
	if got := e.auditKinds("fx__echo"); !reflect.DeepEqual(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}
	// Names that differ otherwise, and the same name in two objects, pass.
	if res := call(t, cs, "fx__echo", map[string]any{"text": "x", "q": map[string]any{"text": 1}}, nil); res.IsError {
		t.Errorf("distinct names were refused: %s", text(res))
	}
}

// TestBuiltinNamesExact checks that a built-in tool reads its arguments by
// their exact names: "NAME" is no "name" (encoding/json would take it for
// one), so the tool is not run with it.
func TestBuiltinNamesExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	if _, err := e.store.PutNote(t.Context(), store.Note{Owner: alice, Name: "keep", Body: "secret"}); err != nil {
		t.Fatal(err)
	}
	cs := e.connect(alice, "", nil, "")
	for _, args := range []map[string]any{{"NAME": "keep"}, {"Name": "keep"}, {"ſession": "x", "name": "keep"}} {
		res := call(t, cs, "notes_read", args, nil)
		if !res.IsError || strings.Contains(text(res), "secret") || !strings.Contains(text(res), "there is no argument") {
			t.Errorf("notes_read(%v) = %s, want the name refused", args, text(res))
		}
	}
	if res := call(t, cs, "notes_read", map[string]any{"name": "keep"}, nil); res.IsError || !strings.Contains(text(res), "secret") {
		t.Errorf("notes_read(name) = %s", text(res))
	}
}

// TestDecodeArgumentsExact checks the decoder of built-in arguments on its
// own: exact names, unknown members and wrong types named.
func TestDecodeArgumentsExact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args, want string
	}{
		{`{"id":"a","limit":5}`, ""},
		{`{"ID":"a"}`, `there is no argument "ID".`},
		{`{"id":"a","ſimit":5}`, `there is no argument "ſimit".`},
		{`{"id":"a","limit":"5"}`, `"limit" has the wrong type.`},
		{`{"id":"a","after":1.5}`, `"after" has the wrong type.`},
	} {
		var in sessionReadInput
		err := decodeArguments([]byte(tc.args), &in)
		if got := argumentMessage(err); got != tc.want {
			t.Errorf("decodeArguments(%s) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// argumentMessage is the caller's message of an argument error; empty for
// none.
func argumentMessage(err error) string {
	if err == nil {
		return ""
	}
	return argumentProblem(err)
}
