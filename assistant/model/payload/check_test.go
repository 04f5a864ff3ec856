package payload_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
)

// A case is one broken (or sound) history and the payload a profile makes
// of it.
type repairCase struct {
	name string
	in   []model.Message
	want []model.Message
}

// runCases prepares each case's history with p and checks the payload,
// the rules' invariants, that preparing it again changes nothing, and that
// the history is unchanged, byte for byte, both after Prepare and after
// the payload is overwritten (so the two share no memory).
func runCases(t *testing.T, p payload.Profile, cases []repairCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := cloneMessages(tc.in)
			got := payload.Prepare(p, tc.in)
			if !reflect.DeepEqual(tc.in, before) {
				t.Fatalf("Prepare modified its input:\n got %s\nwant %s", dump(tc.in), dump(before))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("payload:\n got %s\nwant %s", dump(got), dump(tc.want))
			}
			checkPayload(t, p, got)
			if again := payload.Prepare(p, got); !reflect.DeepEqual(again, got) {
				t.Errorf("preparing the payload again changed it:\n got %s\nwant %s", dump(again), dump(got))
			}
			scribble(got)
			if !reflect.DeepEqual(tc.in, before) {
				t.Fatalf("the payload shares memory with the input:\n got %s\nwant %s", dump(tc.in), dump(before))
			}
		})
	}
}

// checkPayload checks what every payload of profile p satisfies.
func checkPayload(t *testing.T, p payload.Profile, out []model.Message) {
	t.Helper()
	for i, m := range out {
		if strings.HasPrefix(m.Content, payload.SummaryMarker) {
			t.Errorf("message %d still starts with the summary marker: %q", i, m.Content)
		}
		for _, c := range m.ToolCalls {
			if c.ArgumentsError != "" || !json.Valid(c.Arguments) {
				t.Errorf("message %d: call %q has arguments %q, error %q", i, c.ID, c.Arguments, c.ArgumentsError)
			}
		}
		if p&payload.TextOnly != 0 && m.Parts != nil {
			t.Errorf("message %d of a text-only payload has parts: %+v", i, m.Parts)
		}
	}
	if p&payload.Strict != 0 {
		checkStrict(t, out)
	}
}

// checkStrict checks the invariants of a strict payload: one system
// message at most, first; every call answered once by the tool messages
// right after its assistant message, and every tool message such an
// answer; call ids unique; no two user or two assistant messages in a
// row, none empty; and no assistant message last.
func checkStrict(t *testing.T, out []model.Message) {
	t.Helper()
	ids := map[string]bool{}
	var open map[string]bool // the calls of the current exchange not yet answered
	for i, m := range out {
		if m.Role != model.RoleTool && len(open) > 0 {
			t.Errorf("message %d (%s) comes before calls %v are answered", i, m.Role, keys(open))
		}
		if m.Role != model.RoleTool {
			open = nil
		}
		switch m.Role {
		case model.RoleSystem:
			if i != 0 {
				t.Errorf("system message at %d", i)
			}
		case model.RoleUser, model.RoleAssistant:
			if m.Content == "" && len(m.Parts) == 0 && len(m.ToolCalls) == 0 {
				t.Errorf("message %d (%s) is empty", i, m.Role)
			}
			if i > 0 && out[i-1].Role == m.Role {
				t.Errorf("messages %d and %d are both %s", i-1, i, m.Role)
			}
			if m.Role == model.RoleUser && len(m.ToolCalls) > 0 {
				t.Errorf("user message %d has calls", i)
			}
			open = map[string]bool{}
			for _, c := range m.ToolCalls {
				if c.ID == "" || ids[c.ID] {
					t.Errorf("message %d: call id %q is empty or used before", i, c.ID)
				}
				ids[c.ID] = true
				open[c.ID] = true
			}
		case model.RoleTool:
			if !open[m.ToolCallID] {
				t.Errorf("tool message %d answers %q, no open call of its exchange", i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		}
	}
	if len(open) > 0 {
		t.Errorf("calls %v are never answered", keys(open))
	}
	if n := len(out); n > 0 && out[n-1].Role == model.RoleAssistant {
		t.Errorf("the payload ends with the assistant")
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// cloneMessages copies msgs deeply, by hand: it does not trust the code
// under test to do it.
func cloneMessages(msgs []model.Message) []model.Message {
	if msgs == nil {
		return nil
	}
	out := make([]model.Message, len(msgs))
	for i, m := range msgs {
		if m.ToolCalls != nil {
			calls := make([]model.ToolCall, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				if c.Arguments != nil {
					c.Arguments = append(json.RawMessage{}, c.Arguments...)
				}
				calls[j] = c
			}
			m.ToolCalls = calls
		}
		if m.Parts != nil {
			parts := make([]model.Part, len(m.Parts))
			for j, part := range m.Parts {
				if part.Data != nil {
					part.Data = append([]byte{}, part.Data...)
				}
				parts[j] = part
			}
			m.Parts = parts
		}
		out[i] = m
	}
	return out
}

// scribble overwrites everything a payload holds by reference.
func scribble(msgs []model.Message) {
	for i := range msgs {
		for j := range msgs[i].ToolCalls {
			c := &msgs[i].ToolCalls[j]
			for k := range c.Arguments {
				c.Arguments[k] = '#'
			}
			c.ID, c.Name = "scribbled", "scribbled"
		}
		for j := range msgs[i].Parts {
			for k := range msgs[i].Parts[j].Data {
				msgs[i].Parts[j].Data[k] = '#'
			}
		}
		msgs[i].Content = "scribbled"
	}
}

// dump shows messages with their arguments as text.
func dump(msgs []model.Message) string {
	var b strings.Builder
	b.WriteString("[")
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n  {%s %q", m.Role, m.Content)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, " call(%s %s %s err=%q)", c.ID, c.Name, c.Arguments, c.ArgumentsError)
		}
		if m.ToolCallID != "" {
			fmt.Fprintf(&b, " answers=%s", m.ToolCallID)
		}
		for _, part := range m.Parts {
			fmt.Fprintf(&b, " part(%+v)", part)
		}
		b.WriteString("}")
	}
	b.WriteString("]")
	return b.String()
}
