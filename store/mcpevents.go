package store

import (
	"context"
	"errors"
	"time"
)

// The bounds of the MCP events kept for resumption.
const (
	// MaxMCPEventData bounds one event's data; a larger event is not kept
	// (AppendMCPEvent fails with ErrInvalid).
	MaxMCPEventData = 4 << 20
	// MCPEventsPerSession bounds the events kept per session: a session's
	// oldest are deleted beyond it (checked at every 64th event of a
	// stream, so a session may briefly hold up to 63 more).
	MCPEventsPerSession = 1000
	// MCPEventRetention is how long an event is kept: those older are
	// deleted as new streams begin.
	MCPEventRetention = time.Hour
	// maxMCPEventKey bounds a session or stream key.
	maxMCPEventKey = 256
	// mcpEventTrimEvery is how often (in a stream's events) its session
	// is trimmed to MCPEventsPerSession.
	mcpEventTrimEvery = 64
)

// MCPEvent is one event of a stateful MCP session's response stream, kept
// so that a client resuming the stream (Last-Event-ID) on any replica is
// sent what it missed.
type MCPEvent struct {
	// Session and Stream name the stream: Session an opaque key of the
	// session, Stream the stream's id within it.
	Session, Stream string
	// Index is the event's place in its stream, from 0, assigned by
	// AppendMCPEvent.
	Index int
	// Data is the event's data (a JSON-RPC message); empty for a
	// priming event. At most MaxMCPEventData bytes.
	Data      []byte
	CreatedAt time.Time
}

// checkMCPEvent validates an event AppendMCPEvent writes.
func checkMCPEvent(e MCPEvent) error {
	var errs []error
	if e.Session == "" {
		errs = append(errs, errors.New("MCP event Session is empty"))
	}
	if len(e.Session) > maxMCPEventKey || len(e.Stream) > maxMCPEventKey {
		errs = append(errs, errors.New("MCP event Session or Stream is too long"))
	}
	if len(e.Data) > MaxMCPEventData {
		errs = append(errs, errors.New("MCP event Data is larger than MaxMCPEventData"))
	}
	errs = append(errs,
		checkText("MCP event Session", e.Session),
		checkText("MCP event Stream", e.Stream),
		checkTime("MCP event CreatedAt", e.CreatedAt))
	return invalid(errs...)
}

var (
	// asyncMCPEventCommit lets an append's commit return before
	// PostgreSQL has flushed it to disk: an event is there for a client
	// that resumes a broken stream, and the few last ones a crash of the
	// database server may lose cost only that resumption (it is refused,
	// never answered with part of the stream), while waiting for the
	// flush would add a disk write to every event a session sends. What
	// must survive (the call's execution and audit records) is committed
	// as before.
	asyncMCPEventCommit = postgresOnly(`SET LOCAL synchronous_commit TO OFF`)

	// insertMCPEvent gives the event the next index of its stream.
	insertMCPEvent = sql1(`
INSERT INTO mcp_events (session, stream, idx, data, created_at)
SELECT $1::text, $2::text, COALESCE(MAX(idx) + 1, 0), $3::bytea, $4::timestamptz
  FROM mcp_events WHERE session = $1 AND stream = $2
RETURNING idx`)

	// deleteOldMCPEvents sweeps the events past their retention.
	deleteOldMCPEvents = sql1(`DELETE FROM mcp_events WHERE created_at < $1`)

	// trimMCPEvents deletes a session's events older than its $2+1-th
	// newest.
	trimMCPEvents = sql1(`
DELETE FROM mcp_events WHERE session = $1 AND created_at < (
  SELECT created_at FROM mcp_events WHERE session = $1 ORDER BY created_at DESC LIMIT 1 OFFSET $2)`)

	selectMCPEvents = sql1(`
SELECT session, stream, idx, data, created_at FROM mcp_events
 WHERE session = $1 AND stream = $2 AND idx >= $3 ORDER BY idx`)
)

func (c *core) AppendMCPEvent(ctx context.Context, e MCPEvent) (MCPEvent, error) {
	if e.CreatedAt.IsZero() {
		e.CreatedAt = c.now()
	}
	if err := checkMCPEvent(e); err != nil {
		return MCPEvent{}, err
	}
	e.CreatedAt = storedTime(e.CreatedAt)
	if e.Data == nil {
		e.Data = []byte{}
	}
	err := c.inTx(ctx, func(x executor) error {
		if _, err := x.exec(ctx, asyncMCPEventCommit); err != nil {
			return err
		}
		var idx int64
		if err := x.row(ctx, insertMCPEvent, e.Session, e.Stream, e.Data, e.CreatedAt).Scan(&idx); err != nil {
			return err
		}
		e.Index = int(idx)
		if e.Index == 0 {
			if _, err := x.exec(ctx, deleteOldMCPEvents, e.CreatedAt.Add(-MCPEventRetention)); err != nil {
				return err
			}
		}
		if e.Index%mcpEventTrimEvery == 0 {
			if _, err := x.exec(ctx, trimMCPEvents, e.Session, MCPEventsPerSession-1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return MCPEvent{}, c.fail(err)
	}
	return e, nil
}

func (c *core) MCPEventsFrom(ctx context.Context, session, stream string, index int) ([]MCPEvent, error) {
	out, err := queryAll(ctx, c.reader(), selectMCPEvents, func(r rowScanner) (MCPEvent, error) {
		var e MCPEvent
		var idx int64
		err := r.Scan(&e.Session, &e.Stream, &idx, &e.Data, at(&e.CreatedAt))
		e.Index = int(idx)
		return e, err
	}, session, stream, index)
	if err != nil {
		return nil, c.fail(err)
	}
	return out, nil
}
