package assistant

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
	"github.com/usherhq/usher/store"
)

// The summariser of automatic and manual compaction: it summarises a
// conversation, rendered as entries (one per message, see renderEntry), in
// bounded batches, then reduces the batches' summaries hierarchically.
// Each call goes to the configured model with no history and no tools
// (model.Request.Summarize), and is never stored as conversation or
// counted as a turn. Every summary is validated; the first that fails
// fails the whole summary, and the caller writes nothing.

// maxSummaryPasses bounds the hierarchical reduction: the batches'
// summaries, then summaries of those, for at most this many passes in all.
const maxSummaryPasses = 4

// The summariser's instructions: a batch of the conversation, and a pass
// of the reduction.
const (
	summarizeInstructions = "You summarise part of a conversation between a person and an assistant that uses tools, " +
		"so that the assistant can carry on without the messages you summarise. Write a concise summary in plain text: " +
		"what the person asked for and decided, facts and tool results that still matter (names, identifiers, numbers, " +
		"file names), what the assistant did and said it would do, and what is still open. An entry marked " +
		"[earlier summary] summarises what came before: fold it into yours. Do not call tools, do not address " +
		"anyone, and write nothing but the summary."
	reduceInstructions = "You merge the summaries of consecutive parts of one conversation between a person and an " +
		"assistant that uses tools into one concise summary in plain text, keeping what still matters: what the person " +
		"asked for and decided, facts and tool results (names, identifiers, numbers), what the assistant did and said it " +
		"would do, and what is still open. Do not call tools, do not address anyone, and write nothing but the summary."
	summarizeHeading = "The conversation to summarise, one entry per message:\n\n"
	reduceHeading    = "The summaries to merge, in the conversation's order:\n\n"
)

// summaryFailure is why a summary was not written: the model failed
// (invalid false), or a summary it wrote was refused (invalid true).
// Reason is fit to show the run's owner.
type summaryFailure struct {
	Reason  string
	Invalid bool
}

func (f *summaryFailure) Error() string { return "assistant: compaction failed: " + f.Reason }

// summarizer summarises entries added in order, in batches of at most
// chunkBytes. It holds one batch and the batches' summaries, never the
// whole conversation.
type summarizer struct {
	model      model.Provider
	chunkBytes int
	// batch is the entries of the batch being filled.
	batch strings.Builder
	// partials are the summaries of the batches so far.
	partials []string
	// Calls counts the model calls; Passes the passes (1: the batches,
	// 2 and on: reductions); InputTokens the estimated tokens of every
	// entry added.
	Calls, Passes int
	InputTokens   int64
}

// newSummarizer returns a summarizer whose batches hold about chunkTokens
// tokens each.
func newSummarizer(m model.Provider, chunkTokens int) *summarizer {
	return &summarizer{model: m, chunkBytes: chunkTokens * bytesPerToken}
}

// add adds one entry, and summarises the batch once it holds chunkBytes
// or more: a batch is at most chunkBytes and one entry (each bounded, see
// renderEntry), so that a conversation of n bytes takes at most
// ceil(n / chunkBytes) batches.
func (s *summarizer) add(ctx context.Context, entry string) error {
	s.InputTokens += int64((len(entry) + bytesPerToken - 1) / bytesPerToken)
	if s.batch.Len() > 0 {
		s.batch.WriteString("\n\n")
	}
	s.batch.WriteString(entry)
	if s.batch.Len() >= s.chunkBytes {
		return s.flush(ctx)
	}
	return nil
}

// flush summarises the batch.
func (s *summarizer) flush(ctx context.Context) error {
	if s.batch.Len() == 0 {
		return nil
	}
	s.Passes = max(s.Passes, 1)
	sum, err := s.call(ctx, summarizeInstructions, summarizeHeading, s.batch.String())
	if err != nil {
		return err
	}
	s.partials = append(s.partials, sum)
	s.batch.Reset()
	return nil
}

// finish summarises the last batch and reduces the batches' summaries to
// one, in at most maxSummaryPasses passes in all.
func (s *summarizer) finish(ctx context.Context) (string, error) {
	if err := s.flush(ctx); err != nil {
		return "", err
	}
	if len(s.partials) == 0 {
		return "", &summaryFailure{Reason: "there was nothing to summarise", Invalid: true}
	}
	for len(s.partials) > 1 {
		if s.Passes == maxSummaryPasses {
			return "", &summaryFailure{Reason: fmt.Sprintf("the summaries did not reduce to one in %d passes", maxSummaryPasses), Invalid: true}
		}
		s.Passes++
		var next []string
		var group strings.Builder
		reduce := func() error {
			sum, err := s.call(ctx, reduceInstructions, reduceHeading, group.String())
			if err == nil {
				next = append(next, sum)
			}
			group.Reset()
			return err
		}
		for _, p := range s.partials {
			if group.Len() > 0 {
				group.WriteString("\n\n")
			}
			group.WriteString(p)
			if group.Len() >= s.chunkBytes {
				if err := reduce(); err != nil {
					return "", err
				}
			}
		}
		if group.Len() > 0 {
			if err := reduce(); err != nil {
				return "", err
			}
		}
		s.partials = next
	}
	return s.partials[0], nil
}

// call asks the model for one summary of text and validates it: text only
// (no tool calls), not empty, at most store.MaxSnapshotSummary bytes, and
// a real reduction (under three quarters of the text's estimated tokens).
// A retryable failure is tried once more.
func (s *summarizer) call(ctx context.Context, instructions, heading, text string) (string, error) {
	req := model.Request{Summarize: true, Messages: []model.Message{
		{Role: model.RoleSystem, Content: instructions},
		{Role: model.RoleUser, Content: heading + text},
	}}
	var resp model.Response
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		s.Calls++
		resp, err = s.model.Complete(ctx, req, nil)
		var me *model.Error
		if err == nil || !errors.As(err, &me) || !me.Retryable || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		if me := (*model.Error)(nil); errors.As(err, &me) && ctx.Err() == nil {
			return "", &summaryFailure{Reason: "the model failed: " + me.Message}
		}
		return "", err
	}
	sum := strings.TrimSpace(stripMarker(resp.Message.Content))
	switch in := (len(text) + bytesPerToken - 1) / bytesPerToken; {
	case len(resp.Message.ToolCalls) > 0:
		return "", &summaryFailure{Reason: "the summary called tools", Invalid: true}
	case sum == "":
		return "", &summaryFailure{Reason: "the summary was empty", Invalid: true}
	case !utf8.ValidString(sum):
		return "", &summaryFailure{Reason: "the summary was not valid text", Invalid: true}
	case len(sum) > store.MaxSnapshotSummary:
		return "", &summaryFailure{Reason: fmt.Sprintf("the summary was %d bytes, over %d", len(sum), store.MaxSnapshotSummary), Invalid: true}
	case (len(sum)+bytesPerToken-1)/bytesPerToken*4 >= in*3:
		return "", &summaryFailure{Reason: "the summary was not shorter than three quarters of what it summarised", Invalid: true}
	}
	return sum, nil
}

// stripMarker removes the summary marker (and the line break after it)
// from the start of s, should a model echo it.
func stripMarker(s string) string {
	s = strings.TrimLeft(s, " \t\r\n")
	if rest, ok := strings.CutPrefix(s, payload.SummaryMarker); ok {
		return strings.TrimLeft(rest, "\r\n")
	}
	return s
}
