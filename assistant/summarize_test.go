package assistant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// TestExchangeEnd: the cut of a compaction moves back until no call it
// covers has a result after it, even when a message sent during a turn
// sits between a call and its result, or a later step uses a call id
// again.
func TestExchangeEnd(t *testing.T) {
	t.Parallel()
	user := func(seq int64) store.Event {
		return store.Event{Seq: seq, Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: "hi"})}
	}
	call := func(seq, turn int64, ids ...string) store.Event {
		m := AssistantMessage{MessageSeq: turn}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Name: "count", Arguments: json.RawMessage(`{}`)})
		}
		return store.Event{Seq: seq, Type: EventAssistantMessage, Payload: mustJSON(m)}
	}
	result := func(seq, turn int64, id string) store.Event {
		return store.Event{Seq: seq, Type: EventToolResult, Payload: mustJSON(ToolResult{ToolCallID: id, MessageSeq: turn})}
	}
	tests := []struct {
		name          string
		before, after []store.Event
		want          int64
	}{
		{"whole exchanges", []store.Event{user(1), call(2, 1, "a"), result(3, 1, "a"), call(4, 1)}, []store.Event{user(5)}, 4},
		{"a result after the cut", []store.Event{user(1), call(2, 1, "a")}, []store.Event{result(3, 1, "a")}, 1},
		{"one of two results after the cut", []store.Event{user(1), call(2, 1, "a", "b"), result(3, 1, "a")}, []store.Event{result(4, 1, "b")}, 1},
		{"a message sent during the turn", []store.Event{user(1), call(2, 1, "a"), user(3)}, []store.Event{result(4, 1, "a"), call(5, 1)}, 1},
		{"an id used again later", []store.Event{user(1), call(2, 1, "a"), result(3, 1, "a"), user(4), call(5, 4, "a")},
			[]store.Event{result(6, 4, "a")}, 4},
		{"nothing before the exchange", []store.Event{call(2, 1, "a")}, []store.Event{result(3, 1, "a")}, 0},
		{"nothing at all", nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := exchangeEnd(tt.before, tt.after)
			if err != nil || got != tt.want {
				t.Errorf("exchangeEnd = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

// TestSummarizerBatches summarises 200,000 tokens of entries with the
// demo model in batches of 8,000 tokens: the model calls are at most the
// batches plus one per reduction pass, every call is a real reduction,
// and the result is one summary.
func TestSummarizerBatches(t *testing.T) {
	t.Parallel()
	counter := &countingProvider{Provider: model.NewDemo()}
	s := newSummarizer(counter, MinCompactChunkTokens)
	entry := "[user] " + strings.Repeat("a line the user wrote about the plan ", 10)
	var tokens int64
	for i := 0; tokens < 200_000; i++ {
		e := fmt.Sprintf("%s %d", entry, i)
		tokens += int64((len(e) + bytesPerToken - 1) / bytesPerToken)
		if err := s.add(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := s.finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	batches := (tokens + MinCompactChunkTokens - 1) / MinCompactChunkTokens
	if int64(s.Calls) > batches+int64(s.Passes) || s.Calls != counter.calls || s.Passes < 2 || s.Passes > maxSummaryPasses {
		t.Errorf("%d calls (%d counted) in %d passes for %d batches", s.Calls, counter.calls, s.Passes, batches)
	}
	if sum == "" || len(sum) > store.MaxSnapshotSummary || s.InputTokens != tokens {
		t.Errorf("summary of %d bytes from %d tokens (%d counted)", len(sum), tokens, s.InputTokens)
	}
	for _, req := range counter.reqs {
		if !req.Summarize || len(req.Tools) != 0 || len(req.Messages) != 2 {
			t.Errorf("a summariser request: Summarize %v, %d tools, %d messages", req.Summarize, len(req.Tools), len(req.Messages))
		}
	}
}

// TestSummarizerRefuses: a summary that does not reduce to one in
// maxSummaryPasses passes, or that calls tools, fails; a context error is
// no summaryFailure.
func TestSummarizerRefuses(t *testing.T) {
	t.Parallel()
	// Each summary is just under three quarters of its input: valid, but
	// two of them never fit in one batch.
	slow := providerFunc(func(_ context.Context, req model.Request) (model.Response, error) {
		text := req.Messages[1].Content
		return model.Response{Message: model.Message{Role: model.RoleAssistant, Content: strings.Repeat("x", len(text)*7/10)}}, nil
	})
	s := newSummarizer(slow, MinCompactChunkTokens)
	for i := 0; i < 40; i++ {
		if err := s.add(t.Context(), strings.Repeat("y", 20_000)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.finish(t.Context())
	var f *summaryFailure
	if !errors.As(err, &f) || !f.Invalid || !strings.Contains(f.Reason, "4 passes") || s.Passes != maxSummaryPasses {
		t.Errorf("finish = %v after %d passes, want no reduction in %d passes", err, s.Passes, maxSummaryPasses)
	}

	calls := providerFunc(func(context.Context, model.Request) (model.Response, error) {
		return model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "ok",
			ToolCalls: []model.ToolCall{{ID: "c", Name: "notes_write", Arguments: json.RawMessage(`{}`)}}}}, nil
	})
	s = newSummarizer(calls, MinCompactChunkTokens)
	if err := s.add(t.Context(), strings.Repeat("z", 1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.finish(t.Context()); !errors.As(err, &f) || !f.Invalid || !strings.Contains(f.Reason, "called tools") {
		t.Errorf("finish = %v, want a summary that called tools refused", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s = newSummarizer(model.NewDemo(), MinCompactChunkTokens)
	if err := s.add(ctx, strings.Repeat("z", 1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.finish(ctx); err == nil || errors.As(err, &f) {
		t.Errorf("finish with a cancelled context = %v, want the context's error, not a failure to record", err)
	}
}

// TestBounded: a huge value becomes a placeholder with its size and its
// start, cut on a character boundary.
func TestBounded(t *testing.T) {
	t.Parallel()
	if got := bounded("tool result", "small"); got != "small" {
		t.Errorf("bounded(small) = %q", got)
	}
	huge := strings.Repeat("é", hugeValueBytes)
	got := bounded("tool result", huge)
	if len(got) > hugeValueHead+100 || !strings.HasPrefix(got, fmt.Sprintf("[tool result of %d bytes, not shown whole; it starts: é", len(huge))) ||
		!strings.HasSuffix(got, "é …]") {
		t.Errorf("bounded(huge) = %.120q… (%d bytes)", got, len(got))
	}
}

// TestRunMetadata: the compaction overrides, their bounds, and unknown
// keys refused with a reason.
func TestRunMetadata(t *testing.T) {
	t.Parallel()
	tests := []struct {
		metadata string
		want     CompactSettings
		err      string
	}{
		{"", defaultCompactSettings(), ""},
		{"{}", defaultCompactSettings(), ""},
		{`{"compactThreshold": 0.5, "compactChunkTokens": 8000, "compactRecentMessages": 4}`, CompactSettings{0.5, 8000, 4}, ""},
		{`{"compactThreshold": 0}`, CompactSettings{}, "compactThreshold is 0"},
		{`{"compactThreshold": 1.5}`, CompactSettings{}, "compactThreshold is 1.5"},
		{`{"compactChunkTokens": 7999}`, CompactSettings{}, "compactChunkTokens is 7999"},
		{`{"compactRecentMessages": 3}`, CompactSettings{}, "compactRecentMessages is 3"},
		{`{"compactRecentMessages": 2.5}`, CompactSettings{}, "documented settings"},
		{`{"theme": "dark"}`, CompactSettings{}, "documented settings"},
		{`[1]`, CompactSettings{}, "documented settings"},
	}
	for _, tt := range tests {
		got, err := compactSettingsOf(tt.metadata)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("compactSettingsOf(%s) = %+v, %v; want %+v", tt.metadata, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("compactSettingsOf(%s) = %v, want an error with %q", tt.metadata, err, tt.err)
		}
	}
}

// countingProvider counts and keeps the requests it passes on.
type countingProvider struct {
	model.Provider
	calls int
	reqs  []model.Request
}

func (c *countingProvider) Complete(ctx context.Context, req model.Request, onDelta func(string)) (model.Response, error) {
	c.calls++
	c.reqs = append(c.reqs, req)
	return c.Provider.Complete(ctx, req, onDelta)
}

// providerFunc is a model.Provider of a function.
type providerFunc func(context.Context, model.Request) (model.Response, error)

func (f providerFunc) Complete(ctx context.Context, req model.Request, _ func(string)) (model.Response, error) {
	return f(ctx, req)
}
