package payload_test

import (
	"encoding/json"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
)

// Shorthands for the tables.
func sys(text string) model.Message  { return model.Message{Role: model.RoleSystem, Content: text} }
func user(text string) model.Message { return model.Message{Role: model.RoleUser, Content: text} }
func asst(text string) model.Message { return model.Message{Role: model.RoleAssistant, Content: text} }

func calls(text string, cs ...model.ToolCall) model.Message {
	return model.Message{Role: model.RoleAssistant, Content: text, ToolCalls: cs}
}

func call(id, name, args string) model.ToolCall {
	return model.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}
}

func result(id, text string) model.Message {
	return model.Message{Role: model.RoleTool, Content: text, ToolCallID: id}
}

func TestStrip(t *testing.T) {
	marked := payload.SummaryMarker + "\nThe user planned a trip."
	runCases(t, 0, []repairCase{{
		name: "summary marker removed",
		in:   []model.Message{sys("Be brief."), sys(marked), user("hi")},
		want: []model.Message{sys("Be brief."), sys("The user planned a trip."), user("hi")},
	}, {
		name: "summary marker repeated, or without a line break",
		in:   []model.Message{sys(payload.SummaryMarker + payload.SummaryMarker + "\nsummary"), sys(payload.SummaryMarker)},
		want: []model.Message{sys("summary"), sys("")},
	}, {
		name: "marker inside a text is the text's",
		in:   []model.Message{user("quote: " + payload.SummaryMarker)},
		want: []model.Message{user("quote: " + payload.SummaryMarker)},
	}, {
		name: "arguments error becomes {}",
		in: []model.Message{
			calls("", model.ToolCall{ID: "c1", Name: "t", ArgumentsError: "the arguments are not valid JSON"}),
			result("c1", "the arguments are not valid JSON"),
		},
		want: []model.Message{calls("", call("c1", "t", `{}`)), result("c1", "the arguments are not valid JSON")},
	}, {
		name: "missing, null and blank arguments become {}",
		in:   []model.Message{calls("", call("a", "t", ""), call("b", "t", "null"), call("c", "t", " \n"))},
		want: []model.Message{calls("", call("a", "t", `{}`), call("b", "t", `{}`), call("c", "t", `{}`))},
	}, {
		name: "arguments kept byte for byte",
		in:   []model.Message{calls("", call("a", "t", `{"n": 1e400, "s": "\u00e9", "deep": {"x": [1, {"y": null}]}}`))},
		want: []model.Message{calls("", call("a", "t", `{"n": 1e400, "s": "\u00e9", "deep": {"x": [1, {"y": null}]}}`))},
	}, {
		name: "parts kept for a provider that is not text-only",
		in:   []model.Message{{Role: model.RoleUser, Content: "see", Parts: []model.Part{{Kind: "image", MIMEType: "image/png", Data: []byte{1, 2, 3}}}}},
		want: []model.Message{{Role: model.RoleUser, Content: "see", Parts: []model.Part{{Kind: "image", MIMEType: "image/png", Data: []byte{1, 2, 3}}}}},
	}, {
		name: "nothing",
		in:   nil,
		want: []model.Message{},
	}})
}

func TestTextOnly(t *testing.T) {
	withParts := func(role model.Role, text string, parts ...model.Part) model.Message {
		return model.Message{Role: role, Content: text, Parts: parts}
	}
	runCases(t, payload.TextOnly, []repairCase{{
		name: "image",
		in:   []model.Message{withParts(model.RoleTool, "A chart.", model.Part{Kind: "image", MIMEType: "image/png", Data: make([]byte, 48213)})},
		want: []model.Message{{Role: model.RoleTool, Content: "A chart.\n[image: image/png, 48213 bytes]"}},
	}, {
		name: "audio without text",
		in:   []model.Message{withParts(model.RoleTool, "", model.Part{Kind: "audio", MIMEType: "audio/wav", Data: []byte("RIFF")})},
		want: []model.Message{{Role: model.RoleTool, Content: "[audio: audio/wav, 4 bytes]"}},
	}, {
		name: "embedded resource and resource link",
		in: []model.Message{withParts(model.RoleTool, "Two files.",
			model.Part{Kind: "resource", URI: "file:///notes/todo.txt", MIMEType: "text/plain", Data: []byte("milk")},
			model.Part{Kind: "resource_link", URI: "file:///notes/plans.md", Name: "Plans"})},
		want: []model.Message{{Role: model.RoleTool, Content: "Two files.\n[resource: file:///notes/todo.txt, text/plain, 4 bytes]\n[resource link: file:///notes/plans.md \"Plans\"]"}},
	}, {
		name: "a part names no kind",
		in:   []model.Message{withParts(model.RoleUser, "x", model.Part{})},
		want: []model.Message{user("x\n[attachment]")},
	}, {
		name: "a name cannot break the line",
		in:   []model.Message{withParts(model.RoleUser, "x", model.Part{Kind: "resource_link", Name: "a\nb", MIMEType: "text/\nplain"})},
		want: []model.Message{user("x\n[resource link: \"a\\nb\", text/ plain]")},
	}, {
		name: "empty data is a size",
		in:   []model.Message{withParts(model.RoleUser, "", model.Part{Kind: "resource", URI: "u", Data: []byte{}})},
		want: []model.Message{user("[resource: u, 0 bytes]")},
	}, {
		name: "messages without parts unchanged",
		in:   []model.Message{sys("s"), user("u"), {Role: model.RoleUser, Content: "v", Parts: []model.Part{}}},
		want: []model.Message{sys("s"), user("u"), user("v")},
	}})
}

func TestStrictSystemFirst(t *testing.T) {
	runCases(t, payload.Strict, []repairCase{{
		name: "one system message stays",
		in:   []model.Message{sys("Be brief."), user("hi")},
		want: []model.Message{sys("Be brief."), user("hi")},
	}, {
		name: "later system messages merged into the first, in order",
		in:   []model.Message{sys("Be brief."), user("hi"), asst("Hello."), sys("Summary: a trip."), user("and?"), sys("Use metric units.")},
		want: []model.Message{sys("Be brief.\n\nSummary: a trip.\n\nUse metric units."), user("hi"), asst("Hello."), user("and?")},
	}, {
		name: "a system message after the conversation starts moves first",
		in:   []model.Message{user("hi"), sys("Be brief.")},
		want: []model.Message{sys("Be brief."), user("hi")},
	}, {
		name: "empty system messages add nothing",
		in:   []model.Message{sys(""), user("hi"), sys("s"), sys("")},
		want: []model.Message{sys("s"), user("hi")},
	}, {
		name: "no system message",
		in:   []model.Message{user("hi")},
		want: []model.Message{user("hi")},
	}, {
		name: "only system messages",
		in:   []model.Message{sys("a"), sys("b")},
		want: []model.Message{sys("a\n\nb")},
	}})
}

func TestStrictMergeRoles(t *testing.T) {
	runCases(t, payload.Strict, []repairCase{{
		name: "user after user",
		in:   []model.Message{user("one"), user("two"), user("three")},
		want: []model.Message{user("one\n\ntwo\n\nthree")},
	}, {
		name: "assistant text after assistant text",
		in:   []model.Message{user("hi"), asst("Hello."), asst("How can I help?"), user("notes")},
		want: []model.Message{user("hi"), asst("Hello.\n\nHow can I help?"), user("notes")},
	}, {
		name: "assistant text into the calls after it",
		in:   []model.Message{user("hi"), asst("Let me look."), calls("", call("c1", "notes_list", `{}`)), result("c1", "[]")},
		want: []model.Message{user("hi"), calls("Let me look.", call("c1", "notes_list", `{}`)), result("c1", "[]")},
	}, {
		name: "never across an exchange",
		in: []model.Message{user("hi"), calls("Looking.", call("c1", "t", `{}`)), result("c1", "r1"),
			calls("Again.", call("c2", "t", `{}`)), result("c2", "r2"), asst("Done."), user("thanks")},
		want: []model.Message{user("hi"), calls("Looking.", call("c1", "t", `{}`)), result("c1", "r1"),
			calls("Again.", call("c2", "t", `{}`)), result("c2", "r2"), asst("Done."), user("thanks")},
	}, {
		name: "tool results never merge",
		in:   []model.Message{user("hi"), calls("", call("a", "t", `{}`), call("b", "t", `{}`)), result("a", "ra"), result("b", "rb"), user("ok")},
		want: []model.Message{user("hi"), calls("", call("a", "t", `{}`), call("b", "t", `{}`)), result("a", "ra"), result("b", "rb"), user("ok")},
	}, {
		name: "empty messages dropped, their neighbours merged",
		in:   []model.Message{user("one"), asst(""), user("two"), user("")},
		want: []model.Message{user("one\n\ntwo")},
	}, {
		name: "parts appended when merging",
		in: []model.Message{{Role: model.RoleUser, Content: "a", Parts: []model.Part{{Kind: "image", Data: []byte{1}}}},
			{Role: model.RoleUser, Parts: []model.Part{{Kind: "audio", Data: []byte{2}}}}},
		want: []model.Message{{Role: model.RoleUser, Content: "a", Parts: []model.Part{{Kind: "image", Data: []byte{1}}, {Kind: "audio", Data: []byte{2}}}}},
	}})
}

func TestStrictToolExchanges(t *testing.T) {
	runCases(t, payload.Strict, []repairCase{{
		name: "complete exchange preserved",
		in: []model.Message{sys("s"), user("hi"), calls("Two calls.", call("a", "t", `{"x":1}`), call("b", "u", `{}`)),
			result("b", "rb"), result("a", "ra")},
		want: []model.Message{sys("s"), user("hi"), calls("Two calls.", call("a", "t", `{"x":1}`), call("b", "u", `{}`)),
			result("b", "rb"), result("a", "ra")},
	}, {
		name: "unanswered call discarded, the prose kept",
		in:   []model.Message{user("hi"), calls("I will check.", call("a", "t", `{}`)), user("hello?")},
		want: []model.Message{user("hi"), asst("I will check."), user("hello?")},
	}, {
		name: "a message of unanswered calls alone goes",
		in:   []model.Message{user("hi"), calls("", call("a", "t", `{}`)), user("hello?")},
		want: []model.Message{user("hi\n\nhello?")},
	}, {
		name: "answered calls kept, the unanswered one discarded",
		in:   []model.Message{user("hi"), calls("", call("a", "t", `{}`), call("b", "t", `{}`), call("c", "t", `{}`)), result("c", "rc"), result("a", "ra")},
		want: []model.Message{user("hi"), calls("", call("a", "t", `{}`), call("c", "t", `{}`)), result("c", "rc"), result("a", "ra")},
	}, {
		name: "a call without an id is discarded",
		in:   []model.Message{user("hi"), calls("x", call("", "t", `{}`)), result("", "r")},
		want: []model.Message{user("hi"), asst("x"), user("Tool result:\nr")},
	}, {
		name: "a result after a user message is not its call's answer",
		in:   []model.Message{user("hi"), calls("Checking.", call("a", "t", `{}`)), user("wait"), result("a", "late")},
		want: []model.Message{user("hi"), asst("Checking."), user("wait\n\nTool result for t (call a):\nlate")},
	}})
}

func TestStrictDuplicateIDs(t *testing.T) {
	runCases(t, payload.Strict, []repairCase{{
		name: "second call with one id in a message",
		in:   []model.Message{user("hi"), calls("", call("a", "t", `{"n":1}`), call("a", "t", `{"n":2}`)), result("a", "r")},
		want: []model.Message{user("hi"), calls("", call("a", "t", `{"n":1}`)), result("a", "r")},
	}, {
		name: "second result for a call",
		in:   []model.Message{user("hi"), calls("", call("a", "t", `{}`)), result("a", "first"), result("a", "second")},
		want: []model.Message{user("hi"), calls("", call("a", "t", `{}`)), result("a", "first")},
	}, {
		name: "an id used again by a later exchange is renamed there",
		in: []model.Message{user("one"), calls("", call("call_0", "t", `{}`)), result("call_0", "r1"), asst("A."),
			user("two"), calls("", call("call_0", "t", `{}`)), result("call_0", "r2"), asst("B."), user("three")},
		want: []model.Message{user("one"), calls("", call("call_0", "t", `{}`)), result("call_0", "r1"), asst("A."),
			user("two"), calls("", call("call_0_2", "t", `{}`)), result("call_0_2", "r2"), asst("B."), user("three")},
	}, {
		name: "the first complete exchange keeps the id",
		in: []model.Message{user("one"), calls("Trying.", call("a", "t", `{}`)), user("two"),
			calls("", call("a", "t", `{}`)), result("a", "r")},
		want: []model.Message{user("one"), asst("Trying."), user("two"),
			calls("", call("a", "t", `{}`)), result("a", "r")},
	}, {
		name: "a new name is one nobody took",
		in: []model.Message{user("u"), calls("", call("a", "t", `{}`), call("a_2", "t", `{}`)), result("a", "1"), result("a_2", "2"),
			calls("", call("a", "t", `{}`)), result("a", "3")},
		want: []model.Message{user("u"), calls("", call("a", "t", `{}`), call("a_2", "t", `{}`)), result("a", "1"), result("a_2", "2"),
			calls("", call("a_3", "t", `{}`)), result("a_3", "3")},
	}})
}

func TestStrictOrphanResults(t *testing.T) {
	runCases(t, payload.Strict, []repairCase{{
		name: "a result whose call is outside the window",
		in:   []model.Message{sys("s"), result("gone", "old"), user("hi")},
		want: []model.Message{sys("s"), user("Tool result (call gone):\nold\n\nhi")},
	}, {
		name: "the tool named from a call elsewhere",
		in:   []model.Message{user("hi"), calls("", call("a", "notes_list", `{}`)), user("?"), result("a", "[]"), asst("None.")},
		want: []model.Message{user("hi\n\n?\n\nTool result for notes_list (call a):\n[]"), asst("None."), user(payload.Continuation)},
	}, {
		name: "a result answering no call of its exchange",
		in:   []model.Message{user("hi"), calls("", call("a", "t", `{}`)), result("a", "ra"), result("z", "rz"), asst("ok")},
		want: []model.Message{user("hi"), calls("", call("a", "t", `{}`)), result("a", "ra"), user("Tool result (call z):\nrz"), asst("ok"), user(payload.Continuation)},
	}, {
		name: "an empty result without an id",
		in:   []model.Message{user("hi"), result("", "")},
		want: []model.Message{user("hi\n\nTool result:")},
	}})
}

func TestStrictContinuation(t *testing.T) {
	runCases(t, payload.Strict, []repairCase{{
		name: "ends with the assistant's text",
		in:   []model.Message{user("hi"), asst("Hello.")},
		want: []model.Message{user("hi"), asst("Hello."), user(payload.Continuation)},
	}, {
		name: "interrupted with unanswered calls and prose",
		in:   []model.Message{user("hi"), calls("Let me check.", call("a", "t", `{}`))},
		want: []model.Message{user("hi"), asst("Let me check."), user(payload.Continuation)},
	}, {
		name: "interrupted with unanswered calls only",
		in:   []model.Message{user("hi"), calls("", call("a", "t", `{}`))},
		want: []model.Message{user("hi")},
	}, {
		name: "ends with a tool result",
		in:   []model.Message{user("hi"), calls("", call("a", "t", `{}`)), result("a", "r")},
		want: []model.Message{user("hi"), calls("", call("a", "t", `{}`)), result("a", "r")},
	}, {
		name: "ends with the user",
		in:   []model.Message{sys("s"), user("hi")},
		want: []model.Message{sys("s"), user("hi")},
	}, {
		name: "only the system prompt",
		in:   []model.Message{sys("s")},
		want: []model.Message{sys("s")},
	}})
}

// TestOpenAICompatible runs one history broken every way through the
// profile of the OpenAI-compatible provider.
func TestOpenAICompatible(t *testing.T) {
	runCases(t, payload.OpenAICompatible, []repairCase{{
		name: "everything at once",
		in: []model.Message{
			result("old", "from before the window"),
			sys("Be brief."),
			sys(payload.SummaryMarker + "\nEarlier: the user listed notes."),
			user("show the chart"),
			calls("Fetching.", call("c1", "chart", `{"id":7}`), call("c2", "chart", `{"id":8}`)),
			{Role: model.RoleTool, ToolCallID: "c1", Content: "Chart 7.", Parts: []model.Part{{Kind: "image", MIMEType: "image/png", Data: []byte("PNG")}}},
			result("c1", "again"),
			user("and the other?"),
			user("please"),
			calls("", call("c1", "chart", `{"id":8}`)),
			result("c1", "Chart 8."),
			calls("Also:", model.ToolCall{ID: "c3", Name: "chart", ArgumentsError: "not JSON"}),
		},
		want: []model.Message{
			sys("Be brief.\n\nEarlier: the user listed notes."),
			user("Tool result (call old):\nfrom before the window\n\nshow the chart"),
			calls("Fetching.", call("c1", "chart", `{"id":7}`)),
			result("c1", "Chart 7.\n[image: image/png, 3 bytes]"),
			user("and the other?\n\nplease"),
			calls("", call("c1_2", "chart", `{"id":8}`)),
			result("c1_2", "Chart 8."),
			asst("Also:"),
			user(payload.Continuation),
		},
	}})
}
