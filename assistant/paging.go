package assistant

import (
	"net/http"

	"github.com/usherhq/usher/store"
)

// pageQuery selects a page of messages: the last take before before (-1:
// the latest), or the first take after after.
type pageQuery struct {
	before, after int64
	take          int
	maxBytes      int
	// branch, when not nil, names the branch whose line is read; nil
	// reads the run's active branch.
	branch *int64
}

// messagePage is a page of messages, and whether more lie beyond it in
// the direction it was read.
type messagePage struct {
	Messages []EventView
	HasMore  bool
}

// maxGroupExtension bounds how far a page grows to keep a tool call with
// its results.
const maxGroupExtension = 1000

// page reads a page of the run's messages that never splits a tool call
// from its results: a page ends before a message, never between an
// assistant message and the tool results that answer it. It is cut to
// maxBytes at such a boundary, keeping at least one group.
func (rt *Runtime) page(r *http.Request, runID string, q pageQuery) (messagePage, error) {
	ctx := r.Context()
	backward := q.before != 0
	var msgs []store.Event
	var err error
	if backward {
		before := max(q.before, 0)
		if msgs, err = rt.st.ListMessages(ctx, runID, store.MessageQuery{Before: before, Limit: q.take, Last: true, Branch: q.branch}); err != nil {
			return messagePage{}, err
		}
		// Grow backwards to the call the first results answer.
		for grown := 0; len(msgs) > 0 && msgs[0].Type == EventToolResult && grown < maxGroupExtension; {
			more, err := rt.st.ListMessages(ctx, runID, store.MessageQuery{Before: msgs[0].Seq, Limit: 20, Last: true, Branch: q.branch})
			if err != nil {
				return messagePage{}, err
			}
			if len(more) == 0 {
				break
			}
			i := len(more) - 1
			for i > 0 && more[i].Type == EventToolResult {
				i--
			}
			msgs = append(more[i:], msgs...)
			grown += len(more) - i
		}
		msgs = trimGroups(msgs, q.maxBytes, true)
	} else {
		if msgs, err = rt.st.ListMessages(ctx, runID, store.MessageQuery{After: q.after, Limit: q.take, Branch: q.branch}); err != nil {
			return messagePage{}, err
		}
		// Grow forwards over the results of the last call.
		for len(msgs) > 0 && len(msgs) < q.take+maxGroupExtension {
			next, err := rt.st.ListMessages(ctx, runID, store.MessageQuery{After: msgs[len(msgs)-1].Seq, Limit: 20, Branch: q.branch})
			if err != nil {
				return messagePage{}, err
			}
			i := 0
			for i < len(next) && next[i].Type == EventToolResult {
				i++
			}
			msgs = append(msgs, next[:i]...)
			if i < len(next) || len(next) == 0 {
				break
			}
		}
		msgs = trimGroups(msgs, q.maxBytes, false)
	}
	page := messagePage{Messages: viewEvents(msgs)}
	if len(msgs) > 0 {
		probe := store.MessageQuery{After: msgs[len(msgs)-1].Seq, Limit: 1, Branch: q.branch}
		if backward {
			probe = store.MessageQuery{Before: msgs[0].Seq, Limit: 1, Last: true, Branch: q.branch}
		}
		beyond, err := rt.st.ListMessages(ctx, runID, probe)
		if err != nil {
			return messagePage{}, err
		}
		page.HasMore = len(beyond) > 0
	}
	return page, nil
}

// trimGroups cuts msgs to maxBytes of payload at group boundaries, from
// the far end (the oldest for a backward page), keeping at least one
// group.
func trimGroups(msgs []store.Event, maxBytes int, backward bool) []store.Event {
	total := 0
	for _, m := range msgs {
		total += len(m.Payload)
	}
	for total > maxBytes {
		if backward {
			// Drop the first group: its first message and the results
			// that follow it.
			n := 1
			for n < len(msgs) && msgs[n].Type == EventToolResult {
				n++
			}
			if n == len(msgs) {
				break
			}
			for _, m := range msgs[:n] {
				total -= len(m.Payload)
			}
			msgs = msgs[n:]
		} else {
			// Drop the last group: back to its first message.
			n := len(msgs) - 1
			for n > 0 && msgs[n].Type == EventToolResult {
				n--
			}
			if n == 0 {
				break
			}
			for _, m := range msgs[n:] {
				total -= len(m.Payload)
			}
			msgs = msgs[:n]
		}
	}
	return msgs
}
