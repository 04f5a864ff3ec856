package assistant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
	"github.com/usherhq/usher/store"
)

// Automatic compaction: before a model step, when the request's estimated
// tokens reach the run's threshold of the model's limit, the turn
// summarises the run's messages before a recent verbatim tail into a new
// context snapshot (store.AppendSnapshot), then carries on, in the same
// run, with the bounded context the snapshot makes (boundedTail, withSummary). The
// summary folds the snapshot before it, so the context holds one summary,
// never a chain. A failed or refused summary writes no snapshot: the turn
// goes on with the context it had, and the failure is an event of the
// run's log and a metric. docs/context.md describes it for operators.

// Compaction defaults and bounds; a run's metadata may override them
// (CompactSettings).
const (
	// DefaultCompactThreshold is the fraction of the model's context
	// limit at which a turn compacts.
	DefaultCompactThreshold = 0.8
	// DefaultCompactChunkTokens is the size of the summariser's batches.
	DefaultCompactChunkTokens = 60_000
	// MinCompactChunkTokens is the smallest batch a run may ask for.
	MinCompactChunkTokens = 8_000
	// DefaultCompactRecentMessages is how many of the latest messages
	// stay verbatim.
	DefaultCompactRecentMessages = 12
	// MinCompactRecentMessages is the fewest a run may ask for.
	MinCompactRecentMessages = 4
)

// ContextCompacted is the payload of agent.context.compacted: a snapshot
// was written.
type ContextCompacted struct {
	Version int64  `json:"version"`
	FromSeq int64  `json:"fromSeq"`
	ToSeq   int64  `json:"toSeq"`
	Kind    string `json:"kind"`
	// Messages counts the messages summarised since the snapshot before.
	Messages int `json:"messages"`
	// TokensBefore is the estimated size of the request that crossed the
	// threshold; SummaryTokens that of the summary.
	TokensBefore  int64 `json:"tokensBefore,omitempty"`
	SummaryTokens int64 `json:"summaryTokens"`
	ModelCalls    int   `json:"modelCalls"`
	Passes        int   `json:"passes"`
}

// CompactionFailed is the payload of agent.context.compaction_failed: no
// snapshot was written, and the turn went on with the context it had.
type CompactionFailed struct {
	// Reason says why, fit to show the run's owner.
	Reason       string `json:"reason"`
	TokensBefore int64  `json:"tokensBefore,omitempty"`
	ModelCalls   int    `json:"modelCalls"`
	Passes       int    `json:"passes"`
}

// CompactSettings are a run's compaction settings: the runtime's defaults,
// overridden by the run's metadata.
type CompactSettings struct {
	// Threshold is the fraction of the context limit at which a turn
	// compacts: above 0, at most 1.
	Threshold float64
	// ChunkTokens is the size of the summariser's batches: at least
	// MinCompactChunkTokens.
	ChunkTokens int
	// RecentMessages is how many of the latest messages stay verbatim:
	// at least MinCompactRecentMessages.
	RecentMessages int
}

// defaultCompactSettings are the settings of a run without overrides.
func defaultCompactSettings() CompactSettings {
	return CompactSettings{Threshold: DefaultCompactThreshold, ChunkTokens: DefaultCompactChunkTokens, RecentMessages: DefaultCompactRecentMessages}
}

// RunMetadata is a run's metadata as the API takes it: its settings, each
// optional. Unknown keys are refused.
type RunMetadata struct {
	// CompactThreshold overrides DefaultCompactThreshold: above 0, at
	// most 1.
	CompactThreshold *float64 `json:"compactThreshold,omitempty"`
	// CompactChunkTokens overrides DefaultCompactChunkTokens: at least
	// MinCompactChunkTokens, at most MaxCompactChunkTokens.
	CompactChunkTokens *int `json:"compactChunkTokens,omitempty"`
	// CompactRecentMessages overrides DefaultCompactRecentMessages: at
	// least MinCompactRecentMessages, at most MaxCompactRecentMessages.
	CompactRecentMessages *int `json:"compactRecentMessages,omitempty"`
	// Model is the model the run's requests name: one of those offered
	// (GET /api/assistant/models). Absent: the default.
	Model *string `json:"model,omitempty"`
}

// The largest overrides a run may ask for.
const (
	MaxCompactChunkTokens    = 1_000_000
	MaxCompactRecentMessages = 1_000
)

// parseRunMetadata reads and checks a run's metadata (the text of a JSON
// object; "" for none), refusing unknown keys and values out of range
// with an error that names them.
func parseRunMetadata(text string) (RunMetadata, error) {
	var m RunMetadata
	if text == "" {
		return m, nil
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("the metadata must be a JSON object of the documented settings (compactThreshold, compactChunkTokens, compactRecentMessages, model): %v", err)
	}
	var errs []string
	if v := m.CompactThreshold; v != nil && !(*v > 0 && *v <= 1) {
		errs = append(errs, fmt.Sprintf("compactThreshold is %g, want more than 0 and at most 1", *v))
	}
	if v := m.CompactChunkTokens; v != nil && (*v < MinCompactChunkTokens || *v > MaxCompactChunkTokens) {
		errs = append(errs, fmt.Sprintf("compactChunkTokens is %d, want %d to %d", *v, MinCompactChunkTokens, MaxCompactChunkTokens))
	}
	if v := m.CompactRecentMessages; v != nil && (*v < MinCompactRecentMessages || *v > MaxCompactRecentMessages) {
		errs = append(errs, fmt.Sprintf("compactRecentMessages is %d, want %d to %d", *v, MinCompactRecentMessages, MaxCompactRecentMessages))
	}
	if v := m.Model; v != nil && (*v == "" || len(*v) > maxModelName) {
		errs = append(errs, fmt.Sprintf("model is %d bytes, want 1 to %d", len(*v), maxModelName))
	}
	if len(errs) > 0 {
		return m, errors.New(strings.Join(errs, "; "))
	}
	return m, nil
}

// compactSettingsOf is the compaction settings of a run with metadata.
func compactSettingsOf(metadata string) (CompactSettings, error) {
	s := defaultCompactSettings()
	m, err := parseRunMetadata(metadata)
	if err != nil {
		return s, err
	}
	if m.CompactThreshold != nil {
		s.Threshold = *m.CompactThreshold
	}
	if m.CompactChunkTokens != nil {
		s.ChunkTokens = *m.CompactChunkTokens
	}
	if m.CompactRecentMessages != nil {
		s.RecentMessages = *m.CompactRecentMessages
	}
	return s, nil
}

// Compactions counts the compactions of this process by outcome, for
// metrics.
type Compactions struct {
	// Written: a snapshot was written. Failed: the model failed.
	// Invalid: a summary was refused. Conflict: another writer's snapshot
	// came first.
	Written, Failed, Invalid, Conflict int64
}

// compactionCounters are the counters behind Compactions.
type compactionCounters struct {
	written, failed, invalid, conflict atomic.Int64
}

// failure counts a compaction that f ended.
func (c *compactionCounters) failure(f *summaryFailure) {
	if f.Invalid {
		c.invalid.Add(1)
	} else {
		c.failed.Add(1)
	}
}

// Compactions returns the compactions this process has made, by outcome.
func (rt *Runtime) Compactions() Compactions {
	c := &rt.compactions
	return Compactions{Written: c.written.Load(), Failed: c.failed.Load(), Invalid: c.invalid.Load(), Conflict: c.conflict.Load()}
}

// Bounds of what the summariser sees of one message.
const (
	// hugeValueBytes is the largest value (a message's text, a call's
	// arguments, a tool result) the summariser sees whole; a larger one
	// becomes a placeholder with its size and its start.
	hugeValueBytes = 8 << 10
	// hugeValueHead is how much of a huge value's start the placeholder
	// quotes.
	hugeValueHead = 512
	// compactPage is how many messages the summariser reads at once.
	compactPage = 200
)

// bounded returns v, or, when it is larger than hugeValueBytes, a
// placeholder naming what it is, its size and its start.
func bounded(what, v string) string {
	if len(v) <= hugeValueBytes {
		return v
	}
	head := v[:hugeValueHead]
	for !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	return fmt.Sprintf("[%s of %d bytes, not shown whole; it starts: %s …]", what, len(v), head)
}

// renderEntry is a message event as the summariser reads it: one entry,
// tagged with who wrote it, every value bounded. A summary (of a run
// continued from another, or echoed) is tagged [earlier summary], to fold.
func renderEntry(e store.Event) (string, error) {
	var b strings.Builder
	switch e.Type {
	case EventUserMessage:
		var m UserMessage
		if err := json.Unmarshal(e.Payload, &m); err != nil {
			return "", fmt.Errorf("assistant: event %d: %w", e.Seq, err)
		}
		b.WriteString("[user] " + bounded("message", m.Content))
		for _, p := range attachmentParts(m.Attachments) {
			p.URI = "" // the placeholder names the file, not where it is kept
			b.WriteString("\n" + payload.Placeholder(p))
		}
	case EventSummaryMessage:
		var m SummaryMessage
		if err := json.Unmarshal(e.Payload, &m); err != nil {
			return "", fmt.Errorf("assistant: event %d: %w", e.Seq, err)
		}
		return "[earlier summary]\n" + bounded("summary", m.Content), nil
	case EventAssistantMessage:
		var m AssistantMessage
		if err := json.Unmarshal(e.Payload, &m); err != nil {
			return "", fmt.Errorf("assistant: event %d: %w", e.Seq, err)
		}
		b.WriteString("[assistant]")
		if m.Content != "" {
			b.WriteString(" " + bounded("message", m.Content))
		}
		for _, c := range m.ToolCalls {
			b.WriteString("\n[assistant calls " + c.Name + "] " + bounded("arguments", string(c.Arguments)))
		}
	case EventToolResult:
		var r ToolResult
		if err := json.Unmarshal(e.Payload, &r); err != nil {
			return "", fmt.Errorf("assistant: event %d: %w", e.Seq, err)
		}
		tag := "[result of " + r.Name + "]"
		switch {
		case r.Status == ToolApprovalPending:
			tag = "[result of " + r.Name + ", waiting for a person's approval]"
		case r.IsError:
			tag = "[result of " + r.Name + ", an error]"
		}
		b.WriteString(tag + " " + bounded("tool result", r.Content))
		for _, p := range toModelParts(r.Parts) {
			b.WriteString("\n" + payload.Placeholder(p))
		}
	default:
		return "", nil
	}
	return b.String(), nil
}

// compactSettings are the run's compaction settings.
func (t *turn) compactSettings() CompactSettings {
	s, err := compactSettingsOf(t.run.Metadata)
	if err != nil {
		// Metadata is checked as it is written: this is a run written by
		// another version. The defaults hold.
		t.rt.log.Warn("assistant: a run's compaction settings are unusable; using the defaults", "run", t.run.ID, "err", err)
		return defaultCompactSettings()
	}
	return s
}

// maybeCompact compacts the run when est, the estimate of the request
// about to be sent, reaches the run's threshold, at most once per slice.
// It reports whether it wrote a snapshot (or found another writer's), so
// that the request must be built again.
func (t *turn) maybeCompact(ctx context.Context, est *store.RunContext) (bool, error) {
	set := t.compactSettings()
	if t.compactTried || est.Limit <= 0 || float64(est.Tokens) < set.Threshold*float64(est.Limit) {
		return false, nil
	}
	t.compactTried = true
	toSeq, err := t.compactionCut(ctx, set.RecentMessages, est.Limit)
	if err != nil || toSeq == 0 {
		return false, err
	}
	snap, res, err := t.rt.compact(withUsageOwner(ctx, t.run.Owner), t.run.ID, t.snap, toSeq, set.ChunkTokens, store.SnapshotAutomatic)
	var f *summaryFailure
	switch {
	case errors.As(err, &f):
		t.rt.compactions.failure(f)
		t.rt.log.Warn("assistant: compaction failed; the turn goes on with its context", "run", t.run.ID, "reason", f.Reason)
		_, err := t.append(ctx, store.NewEvent{Type: EventCompactionFailed, Payload: mustJSON(CompactionFailed{
			Reason: f.Reason, TokensBefore: est.Tokens, ModelCalls: res.Calls, Passes: res.Passes})})
		return false, err
	case errors.Is(err, store.ErrConflict):
		// Another writer's snapshot came first (or this one's coverage
		// fell behind it): build the context from the latest.
		t.rt.compactions.conflict.Add(1)
		t.snapRead, t.past = false, nil
		return true, t.readSnapshot(ctx)
	case err != nil:
		return false, err
	}
	t.rt.compactions.written.Add(1)
	t.snap, t.past = &snap, nil
	_, err = t.append(ctx, store.NewEvent{Type: EventCompacted, Payload: mustJSON(ContextCompacted{
		Version: snap.Version, FromSeq: snap.FromSeq, ToSeq: snap.ToSeq, Kind: string(snap.Kind), Messages: res.Messages,
		TokensBefore: est.Tokens, SummaryTokens: snap.Tokens, ModelCalls: res.Calls, Passes: res.Passes})})
	return true, err
}

// compactionCut is the last message the turn's compaction covers: the
// last before the recent latest verbatim messages of the request (those
// after the snapshot's coverage, in turn order), and never inside a tool
// exchange, so that no call is covered while a result of it is not. It is
// 0 when nothing new would be covered, or when what the cut takes out of
// the request is under a tenth of limit: the request is large for other
// reasons (its tools, its recent messages), and a summary would not make
// it smaller, only cost a model call on every turn.
func (t *turn) compactionCut(ctx context.Context, recent int, limit int64) (int64, error) {
	own, err := projectSeqs(t.messages)
	if err != nil {
		return 0, err
	}
	verbatim := slices.Concat(t.pastMsgs, afterCoverage(t.snap, own))
	start := len(verbatim) - recent
	for start > 0 && verbatim[start].Role == model.RoleTool {
		start-- // keep a result with its call
	}
	if start <= 0 || estimateTokens(model.Request{Messages: messagesOf(verbatim[:start])})*10 < limit {
		return 0, nil
	}
	first := verbatim[start].Seq
	for _, m := range verbatim[start:] {
		first = min(first, m.Seq)
	}
	var covered int64
	if t.snap != nil {
		covered = t.snap.ToSeq
	}
	before, err := t.rt.st.ListMessages(ctx, t.run.ID, store.MessageQuery{After: covered, Before: first, Limit: 64, Last: true})
	if err != nil || len(before) == 0 {
		return 0, err
	}
	after, err := t.rt.st.ListMessages(ctx, t.run.ID, store.MessageQuery{After: before[len(before)-1].Seq, Limit: 64})
	if err != nil {
		return 0, err
	}
	return exchangeEnd(before, after)
}

// exchangeEnd is the last message of before (the messages up to a cut,
// in sequence order) that ends no tool exchange early: no call at or
// before it has a result in before after it or in after (the messages
// after the cut). It is 0 when there is none.
func exchangeEnd(before, after []store.Event) (int64, error) {
	all := slices.Concat(before, after)
	// callAt maps a call, by its turn and id, to its assistant message's
	// sequence, as results find it: the latest such call before them.
	type callKey struct {
		turn int64
		id   string
	}
	callAt := map[callKey]int64{}
	// calls[i] is the sequence of the assistant message whose call the
	// result all[i] answers (0 for other messages, or a call not read).
	calls := make([]int64, len(all))
	for i, e := range all {
		switch e.Type {
		case EventAssistantMessage:
			var m AssistantMessage
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				return 0, fmt.Errorf("assistant: event %d: %w", e.Seq, err)
			}
			for _, c := range m.ToolCalls {
				callAt[callKey{m.MessageSeq, c.ID}] = e.Seq
			}
		case EventToolResult:
			var r ToolResult
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				return 0, fmt.Errorf("assistant: event %d: %w", e.Seq, err)
			}
			calls[i] = callAt[callKey{r.MessageSeq, r.ToolCallID}]
		}
	}
	cut := len(before) - 1
	for cut >= 0 {
		to := before[cut].Seq
		// The earliest call at or before the cut answered after it.
		early := int64(0)
		for i := cut + 1; i < len(all); i++ {
			if c := calls[i]; c != 0 && c <= to && (early == 0 || c < early) {
				early = c
			}
		}
		if early == 0 {
			return to, nil
		}
		for cut >= 0 && before[cut].Seq >= early {
			cut--
		}
	}
	return 0, nil
}

// compactResult is what a compaction did.
type compactResult struct {
	// Messages counts the messages summarised beyond the snapshot
	// folded; Calls and Passes are the summariser's.
	Messages      int
	Calls, Passes int
}

// compact summarises runID's messages up to toSeq, folding prev (the
// latest snapshot, nil for none), and appends the summary as the next
// snapshot of kind. Reading the messages a page at a time, it holds one
// page, one batch and the batches' summaries, never the conversation. A
// *summaryFailure says why no snapshot was written; store.ErrConflict
// that another writer's came first.
func (rt *Runtime) compact(ctx context.Context, runID string, prev *store.ContextSnapshot, toSeq int64, chunkTokens int, kind store.SnapshotKind) (store.ContextSnapshot, compactResult, error) {
	sum := newSummarizer(rt.compactModel, chunkTokens)
	var res compactResult
	after, from := int64(0), int64(0)
	if prev != nil {
		after, from = prev.ToSeq, prev.FromSeq
		if err := sum.add(ctx, "[earlier summary]\n"+prev.Summary); err != nil {
			return store.ContextSnapshot{}, res, err
		}
	}
	for after < toSeq {
		page, err := rt.st.ListMessages(ctx, runID, store.MessageQuery{After: after, Before: toSeq + 1, Limit: compactPage})
		if err != nil {
			return store.ContextSnapshot{}, res, err
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].Seq
		if from == 0 {
			from = page[0].Seq
		}
		msgs, err := inTurns(page)
		if err != nil {
			return store.ContextSnapshot{}, res, err
		}
		for _, e := range turnOrder(msgs) {
			entry, err := renderEntry(e)
			if err != nil {
				return store.ContextSnapshot{}, res, err
			}
			if entry == "" {
				continue
			}
			res.Messages++
			if err := sum.add(ctx, entry); err != nil {
				res.Calls, res.Passes = sum.Calls, sum.Passes
				return store.ContextSnapshot{}, res, err
			}
		}
	}
	text, err := sum.finish(ctx)
	res.Calls, res.Passes = sum.Calls, sum.Passes
	if err != nil {
		return store.ContextSnapshot{}, res, err
	}
	if from == 0 {
		return store.ContextSnapshot{}, res, &summaryFailure{Reason: "there was nothing to summarise", Invalid: true}
	}
	version := int64(1)
	if prev != nil {
		version = prev.Version + 1
	}
	snap, err := rt.st.AppendSnapshot(ctx, store.ContextSnapshot{
		RunID: runID, Version: version, FromSeq: from, ToSeq: toSeq, Summary: text,
		Tokens: int64((len(text) + bytesPerToken - 1) / bytesPerToken), Kind: kind, Model: rt.o.ModelName,
	})
	return snap, res, err
}
