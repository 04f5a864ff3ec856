package store

import (
	"context"
	"errors"
	"hash/fnv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The bounds of the MCP events kept for resumption.
const (
	// MaxMCPEventData bounds one event's data; a larger event is not kept
	// (AppendMCPEvents fails with ErrInvalid).
	MaxMCPEventData = 4 << 20
	// MCPEventsPerSession bounds the events kept per session: a session's
	// oldest are deleted beyond it, checked as some of its events are
	// appended (see trimsAt), so a session may hold some more for a while.
	MCPEventsPerSession = 1000
	// MCPEventRetention is how long an event is kept: those older are
	// deleted as new streams begin, at most once every mcpEventSweepEvery
	// (by the events' times) in each process.
	MCPEventRetention = time.Hour
	// mcpEventSweepEvery is how often the events past their retention are
	// swept at most.
	mcpEventSweepEvery = time.Minute
	// maxMCPEventKey bounds a session or stream key.
	maxMCPEventKey = 256
	// mcpEventTrimEvery is how often (in a stream's events, and in
	// streams begun) a session is trimmed to MCPEventsPerSession.
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
	// AppendMCPEvents.
	Index int
	// Data is the event's data (a JSON-RPC message); empty for a
	// priming event. At most MaxMCPEventData bytes.
	Data      []byte
	CreatedAt time.Time
}

// checkMCPEvent validates an event AppendMCPEvents writes.
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

	// pgInsertMCPEvent is insertMCPEvent and, when trimsAt says so of the
	// event ($5: whether a stream's first event trims, $6 the period),
	// trimMCPEvents, in one statement: the trim does not see the new event
	// (the statement's snapshot is from before it), so it keeps the $7+1
	// newest before it.
	pgInsertMCPEvent = `
WITH ins AS (
  INSERT INTO mcp_events (session, stream, idx, data, created_at)
  SELECT $1::text, $2::text, COALESCE(MAX(idx) + 1, 0), $3::bytea, $4::timestamptz
    FROM mcp_events WHERE session = $1 AND stream = $2
  RETURNING idx
), trimmed AS (
  DELETE FROM mcp_events
   WHERE session = $1
     AND CASE WHEN (SELECT idx FROM ins) = 0 THEN $5::boolean ELSE (SELECT idx FROM ins) % $6 = 0 END
     AND created_at < (
       SELECT created_at FROM mcp_events WHERE session = $1 ORDER BY created_at DESC LIMIT 1 OFFSET $7)
)
SELECT idx FROM ins`

	selectMCPEvents = sql1(`
SELECT session, stream, idx, data, created_at FROM mcp_events
 WHERE session = $1 AND stream = $2 AND idx >= $3 ORDER BY idx`)
)

// mcpEventSweep says when the events past their retention are swept
// next: at most every mcpEventSweepEvery, by the times of the events
// appended, in each process.
type mcpEventSweep struct{ next atomic.Int64 }

// due reports whether an event written at at sweeps, and if so takes the
// sweep: one appender of those that come at once.
func (w *mcpEventSweep) due(at time.Time) bool {
	next := w.next.Load()
	return at.UnixNano() >= next && w.next.CompareAndSwap(next, at.Add(mcpEventSweepEvery).UnixNano())
}

// trimsAt reports whether appending the event at index idx of stream
// trims its session to MCPEventsPerSession. The trim reads the session's
// newest MCPEventsPerSession events, so it is done at one event in
// mcpEventTrimEvery: every such event of a long stream, and the first
// event of one stream in mcpEventTrimEvery begun, chosen by a hash of the
// stream's id. A stateful session's every request is a stream of its own
// with one or two events, so a trim at each stream's first would read a
// full session's thousand events for each request. Stream ids are the
// server's random ones, so a session is trimmed, on average, once in
// every mcpEventTrimEvery streams it begins, whoever begins them.
func trimsAt(stream string, idx int) bool {
	if idx > 0 {
		return idx%mcpEventTrimEvery == 0
	}
	return streamStartTrims(stream)
}

// streamStartTrims reports whether the first event of stream trims its
// session (see trimsAt).
func streamStartTrims(stream string) bool {
	h := fnv.New32a()
	h.Write([]byte(stream))
	return h.Sum32()%mcpEventTrimEvery == 0
}

// prepareMCPEvent checks e and fills what AppendMCPEvents defaults.
func (c *core) prepareMCPEvent(e MCPEvent) (MCPEvent, error) {
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
	return e, nil
}

// prepareMCPEvents checks events and fills what AppendMCPEvents defaults.
func (c *core) prepareMCPEvents(events []MCPEvent) ([]MCPEvent, error) {
	if len(events) == 0 {
		return nil, invalid(errors.New("no MCP event to append"))
	}
	out := make([]MCPEvent, len(events))
	for i, e := range events {
		var err error
		if out[i], err = c.prepareMCPEvent(e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (c *core) AppendMCPEvents(ctx context.Context, events ...MCPEvent) ([]MCPEvent, error) {
	events, err := c.prepareMCPEvents(events)
	if err != nil {
		return nil, err
	}
	err = c.inTx(ctx, func(x executor) error {
		if _, err := x.exec(ctx, asyncMCPEventCommit); err != nil {
			return err
		}
		for i, e := range events {
			var idx int64
			if err := x.row(ctx, insertMCPEvent, e.Session, e.Stream, e.Data, e.CreatedAt).Scan(&idx); err != nil {
				return err
			}
			events[i].Index = int(idx)
			if idx == 0 && c.mcpSweep.due(e.CreatedAt) {
				if _, err := x.exec(ctx, deleteOldMCPEvents, e.CreatedAt.Add(-MCPEventRetention)); err != nil {
					return err
				}
			}
			if trimsAt(e.Stream, int(idx)) {
				if _, err := x.exec(ctx, trimMCPEvents, e.Session, MCPEventsPerSession-1); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, c.fail(err)
	}
	return events, nil
}

// AppendMCPEvents is core's in one round trip: BEGIN, the commit made
// asynchronous, each event with its session's trim, the sweep when it is
// due, and COMMIT, sent together. Its sweep does not wait for an event's
// index (which only the INSERT tells): it is due by time alone, and a
// stream's later event may take it.
func (s *postgresStore) AppendMCPEvents(ctx context.Context, events ...MCPEvent) ([]MCPEvent, error) {
	events, err := s.prepareMCPEvents(events)
	if err != nil {
		return nil, err
	}
	sweep := s.mcpSweep.due(events[0].CreatedAt)
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(asyncMCPEventCommit.pg)
	for _, e := range events {
		b.Queue(pgInsertMCPEvent, e.Session, e.Stream, e.Data, e.CreatedAt, streamStartTrims(e.Stream), mcpEventTrimEvery, MCPEventsPerSession-2)
	}
	if sweep {
		b.Queue(deleteOldMCPEvents.pg, events[0].CreatedAt.Add(-MCPEventRetention))
	}
	b.Queue("commit")
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	defer releaseAfterTx(ctx, conn)
	err = readBatch(conn.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		for range 2 { // BEGIN, SET LOCAL
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		for i := range events {
			var idx int64
			if err := br.QueryRow().Scan(&idx); err != nil {
				return err
			}
			events[i].Index = int(idx)
		}
		if sweep {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return readCommit(br)
	})
	if err != nil {
		return nil, s.fail(err)
	}
	return events, nil
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
