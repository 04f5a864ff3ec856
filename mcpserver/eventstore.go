package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"iter"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
)

// The events of a stateful session's response streams are what a client
// that lost a stream is sent again when it resumes it (Last-Event-ID).
// With Options.Sessions any replica may take the resumption, so the
// events of the response streams of requests (the answers of calls, and
// what was sent before them) are kept in the database, as the session is:
// the replica that resumes a stream it never held replays them from
// there. The store bounds them (store.MCPEventsPerSession per session,
// store.MCPEventRetention old). A session's standalone stream (its GET,
// the stream id "") is the exception: each copy of the session has one of
// its own, numbered from 0 on its replica, so its events are kept in the
// memory of the replica that sent them, and it resumes there.

// EventRecords keeps the events of stateful sessions' response streams
// (a store.Store does).
type EventRecords interface {
	AppendMCPEvent(ctx context.Context, e store.MCPEvent) (store.MCPEvent, error)
	MCPEventsFrom(ctx context.Context, session, stream string, index int) ([]store.MCPEvent, error)
}

// durableEvents is the mcp.EventStore of the stateful endpoint with
// Options.Sessions.
type durableEvents struct {
	records EventRecords
	local   *mcp.MemoryEventStore // the standalone streams'
}

func newDurableEvents(records EventRecords) *durableEvents {
	return &durableEvents{records: records, local: mcp.NewMemoryEventStore(nil)}
}

// eventSession is the key a session's events are kept under: a digest
// of its handle (the SDK's session id), bounded, and not the handle.
func eventSession(handle string) string {
	sum := sha256.Sum256([]byte(handle))
	return hex.EncodeToString(sum[:])
}

// Open implements mcp.EventStore. A stream of a request needs nothing
// before its first event.
func (d *durableEvents) Open(ctx context.Context, session, stream string) error {
	if stream == "" {
		return d.local.Open(ctx, session, stream)
	}
	return nil
}

// Append implements mcp.EventStore. The SDK appends a stream's events in
// order (under the stream's lock), from the one replica that serves the
// stream, beginning at its Open: so the index the store gives each, the
// stream's next, is the one the SDK puts in its event id.
func (d *durableEvents) Append(ctx context.Context, session, stream string, data []byte) error {
	if stream == "" {
		return d.local.Append(ctx, session, stream, data)
	}
	_, err := d.records.AppendMCPEvent(ctx, store.MCPEvent{Session: eventSession(session), Stream: stream, Data: data})
	return err
}

// After implements mcp.EventStore: the events of the stream after index,
// all of them or, when any was deleted, mcp.ErrEventsPurged. The event at
// index is read too, so that a stream whose every event after it was
// deleted is told apart from one that has none yet.
func (d *durableEvents) After(ctx context.Context, session, stream string, index int) iter.Seq2[[]byte, error] {
	if stream == "" {
		return d.local.After(ctx, session, stream, index)
	}
	return func(yield func([]byte, error) bool) {
		from := max(index, 0)
		evs, err := d.records.MCPEventsFrom(ctx, eventSession(session), stream, from)
		if err != nil {
			yield(nil, err)
			return
		}
		for i, e := range evs {
			if e.Index != from+i {
				yield(nil, fmt.Errorf("the event %d of stream %q: %w", from+i, stream, mcp.ErrEventsPurged))
				return
			}
		}
		if index >= 0 && len(evs) == 0 {
			yield(nil, fmt.Errorf("the event %d of stream %q: %w", index, stream, mcp.ErrEventsPurged))
			return
		}
		for _, e := range evs {
			if e.Index > index && !yield(e.Data, nil) {
				return
			}
		}
	}
}

// SessionClosed implements mcp.EventStore. A copy of the session closing
// on this replica does not end the session, which other replicas may
// still resume: its events in the database stay for their retention.
func (d *durableEvents) SessionClosed(ctx context.Context, session string) error {
	return d.local.SessionClosed(ctx, session)
}
