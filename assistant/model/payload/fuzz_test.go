package payload_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
)

// FuzzPrepare builds a message sequence from the fuzzer's bytes (any
// role, ids that collide, calls without results, results without calls,
// summary markers, parts, arguments good and bad) and checks that every
// profile's payload keeps its invariants, that preparing it again changes
// nothing, and that the sequence itself is unchanged.
func FuzzPrepare(f *testing.F) {
	for _, seed := range [][]byte{
		nil,
		{0, 0, 0},
		{1, 1, 1, 3, 0x10, 2, 4, 0, 1},
		{3, 0x21, 0, 4, 1, 0, 4, 1, 0, 1, 2, 3},
		{4, 0, 0, 0, 1, 2, 3, 0x32, 3, 4, 3, 3, 4, 2, 2, 2, 1, 1},
		{2, 2, 2, 2, 2, 2, 3, 0xff, 0xff},
	} {
		f.Add(seed)
	}
	profiles := []payload.Profile{0, payload.TextOnly, payload.Strict, payload.OpenAICompatible}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 3*64 {
			data = data[:3*64]
		}
		msgs := messagesFrom(data)
		before := cloneMessages(msgs)
		for _, p := range profiles {
			out := payload.Prepare(p, msgs)
			if !reflect.DeepEqual(msgs, before) {
				t.Fatalf("profile %d modified its input:\n got %s\nwant %s", p, dump(msgs), dump(before))
			}
			checkPayload(t, p, out)
			if again := payload.Prepare(p, out); !reflect.DeepEqual(again, out) {
				t.Fatalf("profile %d: preparing the payload again changed it:\n got %s\nwant %s\n from %s", p, dump(again), dump(out), dump(msgs))
			}
			scribble(out)
			if !reflect.DeepEqual(msgs, before) {
				t.Fatalf("profile %d: the payload shares memory with its input", p)
			}
		}
	})
}

// messagesFrom decodes three bytes per message: its kind, its ids and
// counts, its text.
func messagesFrom(data []byte) []model.Message {
	ids := []string{"a", "b", "", "a_2"}
	texts := []string{"", "x", payload.SummaryMarker + "\ns", "y z"}
	args := []json.RawMessage{json.RawMessage(`{"k":[1,{"n":null}]}`), nil, json.RawMessage(`null`), json.RawMessage(`{}`)}
	var out []model.Message
	for len(data) >= 3 {
		kind, idb, tb := data[0], data[1], data[2]
		data = data[3:]
		text := texts[int(tb)%len(texts)]
		var m model.Message
		switch kind % 5 {
		case 0:
			m = model.Message{Role: model.RoleSystem, Content: text}
		case 1:
			m = model.Message{Role: model.RoleUser, Content: text}
		case 2:
			m = model.Message{Role: model.RoleAssistant, Content: text}
		case 3:
			m = model.Message{Role: model.RoleAssistant, Content: text}
			for i := range 1 + int(idb>>4)%3 {
				c := model.ToolCall{ID: ids[(int(idb)+i)%len(ids)], Name: "t", Arguments: args[(int(tb>>2)+i)%len(args)]}
				if tb&0x80 != 0 && i == 0 {
					c.Arguments, c.ArgumentsError = nil, "not JSON"
				}
				m.ToolCalls = append(m.ToolCalls, c)
			}
		case 4:
			m = model.Message{Role: model.RoleTool, Content: text, ToolCallID: ids[int(idb)%len(ids)]}
		}
		if kind&0x40 != 0 {
			m.Parts = []model.Part{{Kind: "image", MIMEType: "image/png", Data: []byte{kind, idb, tb}}}
		}
		if kind&0x20 != 0 {
			m.Parts = append(m.Parts, model.Part{Kind: "resource_link", URI: "file:///x", Name: text})
		}
		out = append(out, m)
	}
	return out
}
