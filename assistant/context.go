package assistant

import (
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// Context accounting: before the first model step of each slice, the turn
// estimates the size of the model context it is about to send and records
// it on the run with the model's limit (Options.ContextTokens); after each
// step it records the provider's own count of the request's tokens
// (model.Usage.PromptTokens) instead, when the provider reported one, or
// that step's estimate otherwise. Each figure rides on a write the turn
// makes anyway (the turn's start, a reply with tool calls, the end of the
// slice); only a resumed slice writes its first estimate on its own, since
// nothing else is written between resolving its open calls and its first
// model step.

// Estimator constants: see estimateTokens.
const (
	// bytesPerToken is the estimator's divisor: a token of English text
	// or JSON is about four bytes in the tokenizers of common models.
	bytesPerToken = 4
	// messageOverheadBytes stands for what a message costs beyond its
	// text: its role and the provider's delimiters (about four tokens).
	messageOverheadBytes = 16
	// toolOverheadBytes does the same for an offered tool's envelope.
	toolOverheadBytes = 16
)

// estimateTokens estimates the tokens of req as a provider would count its
// prompt: the UTF-8 bytes of every message's role, content, tool call ids,
// names and arguments and tool call id, plus messageOverheadBytes per
// message, plus each offered tool's name, description and input schema,
// plus toolOverheadBytes per tool, divided by bytesPerToken and rounded
// up. It needs no tokenizer and does not serialise the request, so that it
// costs a pass over the request's strings; it is an estimate, which a
// provider's reported count replaces.
func estimateTokens(req model.Request) int64 {
	var n int64
	for _, m := range req.Messages {
		n += messageOverheadBytes + int64(len(m.Role)+len(m.Content)+len(m.ToolCallID))
		for _, c := range m.ToolCalls {
			n += int64(len(c.ID) + len(c.Name) + len(c.Arguments))
		}
		for _, p := range m.Parts {
			n += partBytes(p)
		}
	}
	for _, tool := range req.Tools {
		n += toolOverheadBytes + int64(len(tool.Name)+len(tool.Description)+len(tool.InputSchema))
	}
	return (n + bytesPerToken - 1) / bytesPerToken
}

// estimated is the accounting of req, about to be sent, whose last message
// is the event seq.
func (t *turn) estimated(req model.Request, seq int64) *store.RunContext {
	return &store.RunContext{Tokens: estimateTokens(req), Limit: int64(t.rt.o.ContextTokens), Source: store.ContextEstimated, Seq: seq}
}

// afterStep is the accounting of a step that sent a request estimated as
// est: the provider's count of its prompt when it reported one, est
// otherwise.
func afterStep(est *store.RunContext, u model.Usage) *store.RunContext {
	if u.PromptTokens <= 0 {
		return est
	}
	c := *est
	c.Tokens, c.Source = int64(u.PromptTokens), store.ContextReported
	return &c
}

// lastSeq is the sequence of the last event a request built now holds:
// the turn's last message so far, or the last message of an earlier turn
// logged after the turn's user message (it arrived while that turn ran).
func (t *turn) lastSeq() int64 {
	seq := t.seq
	for _, e := range t.messages {
		seq = max(seq, e.Seq)
	}
	for _, e := range t.after {
		seq = max(seq, e.Seq)
	}
	return seq
}

// ContextView is a run's context accounting as the API shows it: how many
// tokens the model context of the run's latest model step held, of the
// model's limit.
type ContextView struct {
	Tokens int64 `json:"tokens"`
	Limit  int64 `json:"limit"`
	// Source is "estimated" (by Usher, before the step) or "reported" (by
	// the model provider, after it).
	Source string `json:"source"`
	// Seq is the last event the context held.
	Seq int64     `json:"seq"`
	At  time.Time `json:"at"`
}

// viewContext is c as the API shows it; nil when none was recorded.
func viewContext(c store.RunContext) *ContextView {
	if c.Source == "" {
		return nil
	}
	return &ContextView{Tokens: c.Tokens, Limit: c.Limit, Source: string(c.Source), Seq: c.Seq, At: c.At}
}
