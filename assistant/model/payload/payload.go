package payload

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/usherhq/usher/assistant/model"
)

// SummaryMarker starts the text of a compaction summary in the bounded
// model context, on a line of its own: a later compaction knows the
// summary by it and folds it into the next one rather than summarising a
// summary. It is internal: [Prepare] removes it, and the line break after
// it, from the start of every message, so no provider ever sees it.
const SummaryMarker = "[[usher:context-summary]]"

// Continuation is the text of the neutral user turn [Strict] adds when a
// conversation ends with the assistant: the reply was interrupted, or the
// history ends there, and a strict server expects the user to speak next.
const Continuation = "Continue."

// Profile says which rules [Prepare] applies for a provider, beyond the
// stripping every provider gets. The zero Profile only strips.
type Profile uint8

const (
	// TextOnly is a provider that takes text only: each non-text part of
	// a message becomes a placeholder line appended to its text, naming
	// the part's kind, URI or name, media type and size; the parts go.
	TextOnly Profile = 1 << iota

	// Strict is a provider that checks the conversation's shape. Its
	// rules, in the order they apply:
	//
	//   - System first: every system message, wherever it stands, is
	//     merged in order into one system message at the start (texts
	//     joined by a blank line).
	//   - Tool exchanges: an assistant message with tool calls and the
	//     tool messages right after it are one exchange. A call is kept
	//     when a result of that exchange answers it; the first result for
	//     a call answers it.
	//   - Incomplete envelopes: a call no result of its exchange answers,
	//     or with no id, is discarded; the assistant message keeps its
	//     text, and goes when nothing is left of it.
	//   - Duplicate ids: a second call with one id in the same message is
	//     discarded, and so is a second result for an answered call. A
	//     complete exchange that uses an id an earlier complete exchange
	//     kept (servers that number calls per step do that) is kept, its
	//     call and result renamed ID_2 (ID_3, …, the first free), so both
	//     exchanges reach the model and every id is unique.
	//   - Orphan results: a tool message that answers no call of its
	//     exchange becomes a user message of context, "Tool result for
	//     NAME (call ID):" and its text, NAME being the tool of a call
	//     with that id elsewhere in the conversation, if any.
	//   - Empty messages: a user or assistant message with no text, no
	//     parts and no calls is dropped.
	//   - Adjacent roles merged: two user messages in a row become one,
	//     and an assistant message without calls merges into the
	//     assistant message after it (texts joined by a blank line, parts
	//     appended; the second one's calls kept). Tool messages never
	//     merge, and nothing merges across an exchange: the results stand
	//     between its call and the next message.
	//   - Continuation: a conversation that ends with an assistant message
	//     (an interrupted reply, whose unanswered calls the rules above
	//     discarded) gets a last user message, [Continuation].
	Strict

	// Images is a provider that takes images in user messages: with
	// TextOnly, an image part of a user message that carries its data
	// (an attachment's) stays a part; every other part still becomes a
	// placeholder.
	Images
)

// OpenAICompatible is the profile of [model.OpenAI]: strict, as OpenAI
// and the servers that follow it are, and text only, as the provider
// sends text only. OpenAICompatible|[Images] is its profile for a model
// that takes images (image_url parts).
const OpenAICompatible = Strict | TextOnly

// ImagesIf is [Images] when images is true, else no rule: the profile a
// configuration's switch adds.
func ImagesIf(images bool) Profile {
	if images {
		return Images
	}
	return 0
}

// Prepare returns the payload of msgs for a provider with profile p: a
// deep copy, stripped and repaired by p's rules. It never modifies msgs
// and its result shares no memory with it.
func Prepare(p Profile, msgs []model.Message) []model.Message {
	out := make([]model.Message, 0, len(msgs)+1)
	for _, m := range msgs {
		m = files(strip(m))
		if p&TextOnly != 0 {
			m = placeholders(m, p&Images != 0 && m.Role == model.RoleUser)
		}
		out = append(out, m)
	}
	if p&Strict != 0 {
		out = strict(out)
	}
	return out
}

// strip returns a deep copy of m without what is internal to Usher.
func strip(m model.Message) model.Message {
	for strings.HasPrefix(m.Content, SummaryMarker) {
		m.Content = strings.TrimPrefix(strings.TrimPrefix(m.Content, SummaryMarker), "\n")
	}
	if m.ToolCalls != nil {
		calls := make([]model.ToolCall, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			if c.ArgumentsError != "" || len(bytes.TrimSpace(c.Arguments)) == 0 || string(c.Arguments) == "null" {
				c.Arguments = []byte("{}")
			} else {
				c.Arguments = bytes.Clone(c.Arguments)
			}
			c.ArgumentsError = ""
			calls[i] = c
		}
		m.ToolCalls = calls
	}
	if m.Parts != nil {
		parts := make([]model.Part, len(m.Parts))
		for i, part := range m.Parts {
			part.Data = bytes.Clone(part.Data)
			parts[i] = part
		}
		m.Parts = parts
	}
	return m
}

// placeholders turns m's parts into lines of its text; with images, an
// image part that carries its data stays a part.
func placeholders(m model.Message, images bool) model.Message {
	if len(m.Parts) == 0 {
		m.Parts = nil
		return m
	}
	lines := make([]string, 0, 1+len(m.Parts))
	if m.Content != "" {
		lines = append(lines, m.Content)
	}
	var kept []model.Part
	for _, part := range m.Parts {
		if images && part.Kind == "image" && part.Data != nil {
			kept = append(kept, part)
			continue
		}
		lines = append(lines, Placeholder(part))
	}
	m.Content = strings.Join(lines, "\n")
	m.Parts = kept
	return m
}

// files turns each file part of m that carries its data (a text file a
// person attached) into its text, in a fenced block under its name,
// appended to m's text: every provider takes text. A file without its
// data stays a part.
func files(m model.Message) model.Message {
	if !slices.ContainsFunc(m.Parts, isFile) {
		return m
	}
	texts := []string{}
	if m.Content != "" {
		texts = append(texts, m.Content)
	}
	var rest []model.Part
	for _, part := range m.Parts {
		if !isFile(part) {
			rest = append(rest, part)
			continue
		}
		texts = append(texts, FencedFile(part.Name, string(part.Data)))
	}
	m.Content, m.Parts = strings.Join(texts, "\n\n"), rest
	return m
}

func isFile(p model.Part) bool { return p.Kind == "file" && p.Data != nil }

// FencedFile is a text file as a model reads it: its name, then its text
// in a fenced block whose fence is longer than any run of backticks in
// the text, so that the text cannot close it.
func FencedFile(name, text string) string {
	longest, run := 0, 0
	for _, r := range text {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	return "File " + strconv.Quote(name) + ":\n" + fence + "\n" + strings.TrimSuffix(text, "\n") + "\n" + fence
}

// Placeholder describes a part in one line: "[image: image/png, 48213
// bytes]", "[resource: file:///notes/todo.txt, text/plain, 120 bytes]",
// `[resource link: file:///a.txt "Plans"]` — the size is len(Data), or
// Size when Data is not carried. It is what TextOnly sends for a part.
func Placeholder(part model.Part) string {
	kind := strings.ReplaceAll(part.Kind, "_", " ")
	if kind == "" {
		kind = "attachment"
	}
	var what []string
	switch {
	case part.URI != "" && part.Name != "":
		what = append(what, part.URI+" "+strconv.Quote(part.Name))
	case part.URI != "":
		what = append(what, part.URI)
	case part.Name != "":
		what = append(what, strconv.Quote(part.Name))
	}
	if part.MIMEType != "" {
		what = append(what, part.MIMEType)
	}
	switch {
	case part.Data != nil:
		what = append(what, fmt.Sprintf("%d bytes", len(part.Data)))
	case part.Size > 0:
		what = append(what, fmt.Sprintf("%d bytes", part.Size))
	}
	if len(what) == 0 {
		return "[" + kind + "]"
	}
	// Whitespace, line breaks included, collapses to one space: a
	// part's fields cannot break the placeholder's line.
	return "[" + kind + ": " + strings.Join(strings.Fields(strings.Join(what, ", ")), " ") + "]"
}

// strict applies the Strict rules to msgs, a copy it may reuse.
func strict(msgs []model.Message) []model.Message {
	var system []string
	var systemParts []model.Part
	rest := make([]model.Message, 0, len(msgs))
	names := map[string]string{} // call id → the tool of its first call
	for _, m := range msgs {
		if m.Role == model.RoleSystem {
			if m.Content != "" {
				system = append(system, m.Content)
			}
			systemParts = append(systemParts, m.Parts...)
			continue
		}
		for _, c := range m.ToolCalls {
			if _, ok := names[c.ID]; !ok {
				names[c.ID] = c.Name
			}
		}
		rest = append(rest, m)
	}

	conv := exchanges(rest, names)

	var out []model.Message
	if len(system) > 0 || len(systemParts) > 0 {
		out = append(out, model.Message{Role: model.RoleSystem, Content: strings.Join(system, "\n\n"), Parts: systemParts})
	}
	start := len(out)
	for _, m := range conv {
		if (m.Role == model.RoleUser || m.Role == model.RoleAssistant) && m.Content == "" && len(m.Parts) == 0 && len(m.ToolCalls) == 0 {
			continue
		}
		if n := len(out); n > start {
			last := &out[n-1]
			if last.Role == m.Role && (m.Role == model.RoleUser || m.Role == model.RoleAssistant && len(last.ToolCalls) == 0) {
				last.Content = joinText(last.Content, m.Content)
				last.Parts = append(last.Parts, m.Parts...)
				last.ToolCalls = m.ToolCalls
				continue
			}
		}
		out = append(out, m)
	}
	if n := len(out); n > start && out[n-1].Role == model.RoleAssistant {
		out = append(out, model.Message{Role: model.RoleUser, Content: Continuation})
	}
	return out
}

// exchanges keeps the complete tool exchanges of msgs (no system
// messages), makes their ids unique, and turns the tool results that answer
// no call of their exchange into user messages. names gives the tool of a
// call id, for those messages.
func exchanges(msgs []model.Message, names map[string]string) []model.Message {
	out := make([]model.Message, 0, len(msgs))
	used := map[string]bool{} // call ids of the exchanges kept so far
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		switch {
		case m.Role == model.RoleTool:
			out = append(out, orphan(m, names))
			continue
		case m.Role != model.RoleAssistant || len(m.ToolCalls) == 0:
			out = append(out, m)
			continue
		}
		// The exchange: m and the tool messages right after it.
		end := i + 1
		for end < len(msgs) && msgs[end].Role == model.RoleTool {
			end++
		}
		results := msgs[i+1 : end]
		i = end - 1

		// The first result of the exchange for each call id.
		first := map[string]int{}
		for j, r := range results {
			if _, ok := first[r.ToolCallID]; !ok && r.ToolCallID != "" {
				first[r.ToolCallID] = j
			}
		}
		calls := m.ToolCalls[:0:0]
		rename := map[int]string{} // result index → the id it goes by
		answered := map[string]bool{}
		for _, c := range m.ToolCalls {
			j, ok := first[c.ID]
			if !ok || answered[c.ID] {
				continue // incomplete, or a second call with this id
			}
			answered[c.ID] = true
			id := c.ID
			for n := 2; used[id]; n++ {
				id = c.ID + "_" + strconv.Itoa(n)
			}
			used[id] = true
			rename[j] = id
			c.ID = id
			calls = append(calls, c)
		}
		if len(calls) == 0 {
			calls = nil
		}
		m.ToolCalls = calls
		out = append(out, m) // dropped later if nothing is left of it
		var orphans []model.Message
		for j, r := range results {
			if id, ok := rename[j]; ok {
				r.ToolCallID = id
				out = append(out, r)
			} else if !answered[r.ToolCallID] {
				orphans = append(orphans, orphan(r, names))
			}
			// else: a second result for an answered call.
		}
		out = append(out, orphans...)
	}
	return out
}

// orphan turns a tool result that answers no call of its exchange into
// context the model can still read.
func orphan(r model.Message, names map[string]string) model.Message {
	head := "Tool result"
	switch name := names[r.ToolCallID]; {
	case name != "" && r.ToolCallID != "":
		head += " for " + name + " (call " + r.ToolCallID + ")"
	case r.ToolCallID != "":
		head += " (call " + r.ToolCallID + ")"
	}
	return model.Message{Role: model.RoleUser, Content: joinLine(head+":", r.Content), Parts: r.Parts}
}

func joinText(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n\n" + b
}

func joinLine(head, body string) string {
	if body == "" {
		return head
	}
	return head + "\n" + body
}

// Provider is a [model.Provider] that prepares each request's messages
// with a [Profile] before the provider it wraps completes it. It is safe
// for concurrent use when the wrapped provider is.
type Provider struct {
	next    model.Provider
	profile Profile
}

// NewProvider returns a Provider that prepares every request for next
// with profile.
func NewProvider(next model.Provider, profile Profile) *Provider {
	return &Provider{next: next, profile: profile}
}

// Complete prepares req's messages (see [Prepare]) and has the wrapped
// provider complete the prepared request, with req's tools as they are.
// req itself is not modified.
func (p *Provider) Complete(ctx context.Context, req model.Request, onDelta func(text string)) (model.Response, error) {
	req.Messages = Prepare(p.profile, req.Messages)
	return p.next.Complete(ctx, req, onDelta)
}
