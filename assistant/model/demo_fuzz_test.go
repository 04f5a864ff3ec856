package model

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
)

// FuzzParseCommand checks the demo grammar's parser on any text: it never
// panics, a call always names a tool and carries one compact JSON object,
// and the demo's answer streams exactly its content.
func FuzzParseCommand(f *testing.F) {
	for _, seed := range []string{
		"", "tools", " TOOLS ", "call", "call ", "call notes_list", "call notes_list {}",
		`call notes_write {"title": "a", "n": [1, 2.5e3, null]}`, "call x{", "call x {} {}",
		"call x [1]", "call {\"a\":1}", "CaLl\tx\n{\"k\":\"\\u00e9\"}", "calling", "call x {\"a\":\"<&>\"}",
		"call \u00a0x", "call x\u2028{}", "call x {\"a\": \"\xff\"}",
	} {
		f.Add(seed)
	}
	d := NewDemo()
	tools := []Tool{{Name: "x"}, {Name: "notes_list"}, {Name: "notes_write"}}
	f.Fuzz(func(t *testing.T, text string) {
		cmd := parseCommand(text)
		if again := parseCommand(text); again.kind != cmd.kind || again.tool != cmd.tool || string(again.args) != string(cmd.args) {
			t.Fatalf("parse is not deterministic: %+v then %+v", cmd, again)
		}
		switch cmd.kind {
		case cmdCall:
			if cmd.tool == "" || strings.ContainsFunc(cmd.tool, func(r rune) bool { return r == '{' || unicode.IsSpace(r) }) {
				t.Fatalf("bad tool name %q", cmd.tool)
			}
			var obj map[string]any
			if err := json.Unmarshal(cmd.args, &obj); err != nil || obj == nil {
				t.Fatalf("arguments %q are not a JSON object", cmd.args)
			}
		case cmdCallBadArgs:
			if cmd.tool == "" {
				t.Fatal("bad arguments without a tool name")
			}
		}

		var streamed strings.Builder
		resp, err := d.Complete(t.Context(), Request{Messages: []Message{{Role: RoleUser, Content: text}}, Tools: tools},
			func(s string) { streamed.WriteString(s) })
		if err != nil {
			t.Fatal(err)
		}
		if streamed.String() != resp.Message.Content {
			t.Fatalf("streamed %q, content %q", streamed.String(), resp.Message.Content)
		}
		if (len(resp.Message.ToolCalls) > 0) != (cmd.kind == cmdCall && (cmd.tool == "x" || cmd.tool == "notes_list" || cmd.tool == "notes_write")) {
			t.Fatalf("%q: command %+v, answer %+v", text, cmd, resp.Message)
		}
	})
}
