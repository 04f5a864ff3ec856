package model

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

const providerDemo = "demo"

// Demo is the embedded default's deterministic [Provider]: it answers
// without a network, following the grammar in the package documentation.
// The same request always gets the same response. A Demo is safe for
// concurrent use.
type Demo struct{}

// NewDemo returns the demo provider.
func NewDemo() *Demo { return &Demo{} }

// Lengths the demo keeps its quotes to, in characters.
const (
	demoEchoLen   = 60
	demoResultLen = 240
	demoDescLen   = 100
)

// Complete answers req deterministically and streams its text through
// onDelta in word-sized chunks. See [Provider].
func (d *Demo) Complete(ctx context.Context, req Request, onDelta func(text string)) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, cancelledError(providerDemo, err)
	}
	msg := demoReply(req)
	if req.Summarize {
		msg = Message{Role: RoleAssistant, Content: demoSummarize(req.Messages)}
	}
	resp := Response{Message: msg, FinishReason: "stop"}
	if len(msg.ToolCalls) > 0 {
		resp.FinishReason = "tool_calls"
	}
	for _, chunk := range wordChunks(msg.Content) {
		if err := ctx.Err(); err != nil {
			return Response{}, cancelledError(providerDemo, err)
		}
		if onDelta != nil {
			onDelta(chunk)
		}
	}
	// Word counts stand in for tokens.
	for _, m := range req.Messages {
		resp.Usage.PromptTokens += len(strings.Fields(m.Content))
	}
	resp.Usage.CompletionTokens = len(strings.Fields(msg.Content))
	for _, tc := range msg.ToolCalls {
		resp.Usage.CompletionTokens += 1 + len(strings.Fields(string(tc.Arguments)))
	}
	return resp, nil
}

// demoReply is the whole grammar: it decides on the last message.
func demoReply(req Request) Message {
	reply := func(text string) Message { return Message{Role: RoleAssistant, Content: text} }
	if len(req.Messages) == 0 {
		return reply(demoHelp(req, ""))
	}
	last := req.Messages[len(req.Messages)-1]
	switch last.Role {
	case RoleTool:
		return reply(demoSummary(req.Messages))
	case RoleUser:
	default:
		return reply(demoHelp(req, ""))
	}

	cmd := parseCommand(last.Content)
	switch cmd.kind {
	case cmdTools:
		return reply(demoToolList(req.Tools))
	case cmdCallNoName:
		return reply("Name the tool to call, for example: call " + exampleTool(req.Tools) + " {}")
	case cmdCallBadArgs:
		return reply("The arguments for " + cmd.tool + ` must be one JSON object, for example: call ` +
			cmd.tool + ` {"key": "value"}`)
	case cmdCall:
		if !hasTool(req.Tools, cmd.tool) {
			return reply(`The tool "` + cmd.tool + `" is not available. ` + demoToolNames(req.Tools))
		}
		return Message{Role: RoleAssistant, ToolCalls: []ToolCall{{
			ID:        demoCallID(req.Messages),
			Name:      cmd.tool,
			Arguments: cmd.args,
		}}}
	default:
		return reply(demoHelp(req, last.Content))
	}
}

func demoHelp(req Request, said string) string {
	var b strings.Builder
	b.WriteString("I am Usher's demo model: I answer without a network, following a fixed grammar.")
	if echo := shorten(said, demoEchoLen); echo != "" {
		b.WriteString(` You wrote: "` + echo + `".`)
	}
	// The example ends the reply, so that it can be copied as it is.
	b.WriteString(` Write "tools" to see the tools I can call, or call one with: call TOOL {json arguments}` +
		"\nFor example: call " + exampleTool(req.Tools) + " {}")
	return b.String()
}

func exampleTool(tools []Tool) string {
	if len(tools) > 0 && tools[0].Name != "" {
		return tools[0].Name
	}
	return "notes_list"
}

func hasTool(tools []Tool, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

func demoToolNames(tools []Tool) string {
	if len(tools) == 0 {
		return "I have no tools available right now."
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return "Tools I can call: " + strings.Join(names, ", ") + "."
}

func demoToolList(tools []Tool) string {
	if len(tools) == 0 {
		return "I have no tools available right now."
	}
	var b strings.Builder
	b.WriteString("I can call these tools:")
	for _, t := range tools {
		b.WriteString("\n- " + t.Name)
		if desc := shorten(t.Description, demoDescLen); desc != "" {
			b.WriteString(": " + desc)
		}
	}
	return b.String()
}

// demoSummary quotes the results of the trailing tool messages, naming each
// tool from the assistant message that called it.
func demoSummary(msgs []Message) string {
	start := len(msgs)
	for start > 0 && msgs[start-1].Role == RoleTool {
		start--
	}
	names := map[string]string{}
	for i := start - 1; i >= 0; i-- {
		for _, tc := range msgs[i].ToolCalls {
			if _, seen := names[tc.ID]; !seen {
				names[tc.ID] = tc.Name
			}
		}
	}
	results := msgs[start:]
	quote := func(m Message) string {
		if q := shorten(m.Content, demoResultLen); q != "" {
			return `"` + q + `"`
		}
		return "nothing"
	}
	name := func(m Message) string {
		if n := names[m.ToolCallID]; n != "" {
			return n
		}
		return "the tool"
	}
	if len(results) == 1 {
		return "The tool " + name(results[0]) + " returned: " + quote(results[0])
	}
	var b strings.Builder
	b.WriteString("The tools returned:")
	for _, m := range results {
		b.WriteString("\n- " + name(m) + ": " + quote(m))
	}
	return b.String()
}

// Bounds of the demo's extractive summary.
const (
	// demoSummaryLine is the most characters a line keeps.
	demoSummaryLine = 120
	// demoSummaryMax is the most bytes a summary holds.
	demoSummaryMax = 4 << 10
	// demoSummaryShare is the part of its input a summary may be: one
	// sixteenth, about what a model's summary of a long conversation is;
	// but at least demoSummaryFloor bytes (and at most half the input),
	// so that a short conversation keeps a few lines.
	demoSummaryShare = 16
	demoSummaryFloor = 1 << 10
)

// demoSummarize is the demo's answer to a request for a summary: an
// extractive one of the text of its non-system messages. It keeps their
// lines in order (each once), each shortened to demoSummaryLine characters, within a
// sixteenth of the text's bytes (see demoSummaryShare): the first lines in
// a third of that, the last lines in the rest, and between them a line
// saying how many were left out. Deterministic, and shorter than its input
// once the input is longer than a few lines.
func demoSummarize(msgs []Message) string {
	var lines []string
	seen := map[string]bool{}
	size := 0
	for _, m := range msgs {
		if m.Role == RoleSystem {
			continue
		}
		size += len(m.Content)
		for line := range strings.Lines(m.Content) {
			if l := shorten(line, demoSummaryLine); l != "" && !seen[l] {
				seen[l] = true
				lines = append(lines, l)
			}
		}
	}
	budget := min(max(size/demoSummaryShare, demoSummaryFloor), size/2, demoSummaryMax)
	// take keeps lines from the front (or the back) while they fit in n
	// bytes, each with its line break.
	take := func(lines []string, n int, back bool) int {
		k := 0
		for k < len(lines) {
			l := lines[k]
			if back {
				l = lines[len(lines)-1-k]
			}
			if n -= len(l) + 1; n < 0 {
				break
			}
			k++
		}
		return k
	}
	head := take(lines, budget/3, false)
	tail := take(lines[head:], budget-budget/3-sumLen(lines[:head]), true)
	var b strings.Builder
	b.WriteString(strings.Join(lines[:head], "\n"))
	if left := len(lines) - head - tail; left > 0 {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString("(" + strconv.Itoa(left) + " lines left out)")
	}
	if tail > 0 {
		b.WriteString("\n" + strings.Join(lines[len(lines)-tail:], "\n"))
	}
	return b.String()
}

// sumLen is the bytes of lines, each with its line break.
func sumLen(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l) + 1
	}
	return n
}

// demoCallID derives a tool call's ID from the conversation, so the same
// request gets the same ID and each step of a run a different one.
func demoCallID(msgs []Message) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(msgs)))
	h.Write(n[:])
	for _, m := range msgs {
		// Length-prefixed, so that no two conversations hash alike by
		// moving text from one field to the next.
		for _, s := range []string{string(m.Role), m.Content, m.ToolCallID} {
			binary.BigEndian.PutUint64(n[:], uint64(len(s)))
			h.Write(n[:])
			h.Write([]byte(s))
		}
	}
	return "call_" + hex.EncodeToString(h.Sum(nil)[:8])
}

// shorten collapses whitespace runs to one space and keeps at most n
// characters, marking a cut with "…".
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return strings.TrimRightFunc(string(runes[:n-1]), unicode.IsSpace) + "…"
}

// wordChunks splits text into words, each with the whitespace after it, so
// that the chunks concatenate to text.
func wordChunks(text string) []string {
	var chunks []string
	for text != "" {
		i := strings.IndexFunc(text, unicode.IsSpace)
		if i < 0 {
			chunks = append(chunks, text)
			break
		}
		j := strings.IndexFunc(text[i:], func(r rune) bool { return !unicode.IsSpace(r) })
		if j < 0 {
			chunks = append(chunks, text)
			break
		}
		chunks = append(chunks, text[:i+j])
		text = text[i+j:]
	}
	return chunks
}

type commandKind int

const (
	cmdChat        commandKind = iota // anything else
	cmdTools                          // "tools"
	cmdCall                           // "call TOOL {args}"
	cmdCallNoName                     // "call" without a tool name
	cmdCallBadArgs                    // "call TOOL" followed by something other than one JSON object
)

// command is a parsed user message.
type command struct {
	kind commandKind
	tool string
	args json.RawMessage // cmdCall: a compact JSON object
}

// parseCommand reads a user message as the demo grammar: "tools", or
// "call TOOL" optionally followed by one JSON object, the keywords in any
// case, surrounding whitespace ignored. The tool name runs up to the first
// whitespace or "{".
func parseCommand(text string) command {
	s := strings.TrimSpace(text)
	if strings.EqualFold(s, "tools") {
		return command{kind: cmdTools}
	}
	end := strings.IndexFunc(s, unicode.IsSpace)
	if end < 0 {
		end = len(s)
	}
	if !strings.EqualFold(s[:end], "call") {
		return command{kind: cmdChat}
	}
	rest := strings.TrimLeftFunc(s[end:], unicode.IsSpace)
	end = strings.IndexFunc(rest, func(r rune) bool { return r == '{' || unicode.IsSpace(r) })
	if end < 0 {
		end = len(rest)
	}
	name, args := rest[:end], strings.TrimSpace(rest[end:])
	if name == "" {
		return command{kind: cmdCallNoName}
	}
	if args == "" {
		return command{kind: cmdCall, tool: name, args: json.RawMessage("{}")}
	}
	// A valid JSON text that starts with "{" is one object. Invalid UTF-8
	// is refused rather than silently replaced.
	var compact bytes.Buffer
	if args[0] != '{' || !utf8.ValidString(args) || json.Compact(&compact, []byte(args)) != nil {
		return command{kind: cmdCallBadArgs, tool: name}
	}
	return command{kind: cmdCall, tool: name, args: json.RawMessage(compact.Bytes())}
}
