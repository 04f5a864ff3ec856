package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/store"
)

// seedBatch is how many events the seeding appends per transaction.
const seedBatch = 1000

// seeded is what the seeding wrote: the run's last message (the one the
// page must show) and its last sequence.
type seeded struct {
	lastMessage, lastSeq int64
	messages             int
	took                 time.Duration
}

// seedRun fills the run runID with messages messages (a multiple of four),
// attachments of its user messages sending an image each (seedAttachments),
// straight through the store, as the runtime records turns: the user's
// message, the turn's start and its records, a tool call, its result, the
// answer (Markdown; every fifth with a code block), the turn's end. It
// writes under a lease, in transactions of seedBatch events, with Usher
// stopped: this is the benchmark's own fast path to a long conversation,
// not a way into the product.
func seedRun(ctx context.Context, dsn, runID string, messages, attachments int) (seeded, error) {
	start := time.Now()
	st, err := store.Open(ctx, dsn, nil)
	if err != nil {
		return seeded{}, err
	}
	defer st.Close()
	turns := messages / 4
	images, err := seedAttachments(ctx, st, runID, turns, attachments)
	if err != nil {
		return seeded{}, err
	}
	user := func(turn int) store.NewEvent {
		text := fmt.Sprintf("Message %d: could you list my notes and tell me which ones mention the quarterly report?", turn)
		return store.NewEvent{Type: assistant.EventUserMessage, Payload: mustJSON(assistant.UserMessage{Content: text, Attachments: images[turn]}), Preview: text}
	}
	first, run, err := st.PostMessage(ctx, runID, user(0))
	if err != nil {
		return seeded{}, fmt.Errorf("the first message: %w", err)
	}
	runs, err := st.ClaimRuns(ctx, "uibench-seeder", 10, time.Hour)
	i := slices.IndexFunc(runs, func(c store.Run) bool { return c.ID == run.ID })
	if err != nil || i < 0 {
		return seeded{}, fmt.Errorf("claiming the run to seed: %v %v", runs, err)
	}
	lease := runs[i].Lease()
	next := first.Seq + 1 // the store numbers a run's events one after another
	var batch []store.NewEvent
	var lastMessage int64
	add := func(e store.NewEvent) error {
		if strings.HasPrefix(e.Type, store.MessageEventPrefix) {
			lastMessage = next
		}
		next++
		batch = append(batch, e)
		if len(batch) < seedBatch {
			return nil
		}
		return flush(ctx, st, lease, &batch)
	}
	userSeq := first.Seq
	for turn := range turns {
		if turn > 0 {
			userSeq = next
			if err := add(user(turn)); err != nil {
				return seeded{}, err
			}
		}
		for _, e := range turnEvents(runID, turn, userSeq) {
			if err := add(e); err != nil {
				return seeded{}, err
			}
		}
	}
	if err := flush(ctx, st, lease, &batch); err != nil {
		return seeded{}, err
	}
	if _, err := st.ReleaseRun(ctx, lease, ""); err != nil {
		return seeded{}, err
	}
	r, err := st.GetRun(ctx, runID)
	if err != nil {
		return seeded{}, err
	}
	if r.LastSeq != next-1 || !r.QueuedAt.IsZero() {
		return seeded{}, fmt.Errorf("seeded run: last sequence %d (queued at %v), want %d", r.LastSeq, r.QueuedAt, next-1)
	}
	return seeded{lastMessage: lastMessage, lastSeq: r.LastSeq, messages: turns * 4, took: time.Since(start)}, nil
}

func flush(ctx context.Context, st store.Store, lease store.Lease, batch *[]store.NewEvent) error {
	if len(*batch) == 0 {
		return nil
	}
	if _, err := st.AppendLeased(ctx, lease, *batch...); err != nil {
		return err
	}
	*batch = (*batch)[:0]
	return nil
}

// turnEvents are the events of turn, after its user message (userSeq).
func turnEvents(runID string, turn int, userSeq int64) []store.NewEvent {
	call := fmt.Sprintf("call_%d", turn)
	answer := fmt.Sprintf("You have **three notes**; the first, `quarterly-report-draft`, mentions the quarterly report (turn %d).\n\n"+
		"- groceries\n- team offsite agenda\n\nDo you want me to read it to you?", turn)
	if turn%5 == 0 {
		answer += "\n\nHere is how to list them yourself:\n\n```go\nfunc list(ctx context.Context, c *Client) ([]Note, error) {\n" +
			"\tnotes, err := c.Notes(ctx)\n\tif err != nil {\n\t\treturn nil, fmt.Errorf(\"notes: %w\", err)\n\t}\n\treturn notes, nil\n}\n```"
	}
	return []store.NewEvent{
		{Type: assistant.EventTurnStart, Payload: mustJSON(assistant.TurnStart{MessageSeq: userSeq}), StartsTurn: userSeq},
		{Type: assistant.EventSystemPrompt, Payload: mustJSON(assistant.SystemPromptRecord{RunID: runID, Characters: len(assistant.DefaultSystemPrompt)})},
		{Type: assistant.EventRuntimeContext, Payload: mustJSON(assistant.RuntimeContextRecord{RunID: runID, Messages: 24, Characters: 4800, Tools: 5, Delivery: "held"})},
		{Type: assistant.EventAssistantMessage, Payload: mustJSON(assistant.AssistantMessage{MessageSeq: userSeq,
			ToolCalls: []assistant.ToolCall{{ID: call, Name: "notes_list", Arguments: json.RawMessage(`{}`)}}})},
		{Type: assistant.EventToolResult, Payload: mustJSON(assistant.ToolResult{MessageSeq: userSeq,
			ToolCallID: call, Name: "notes_list", Status: assistant.ToolSucceeded,
			Content: `{"notes":["quarterly-report-draft","groceries","team offsite agenda"],"total":3}`})},
		{Type: assistant.EventAssistantMessage, Payload: mustJSON(assistant.AssistantMessage{MessageSeq: userSeq, Content: answer}), Preview: answer},
		{Type: assistant.EventTurnEnd, Payload: mustJSON(assistant.TurnEnd{MessageSeq: userSeq, Status: assistant.TurnCompleted}), EndsTurn: true},
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
