package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

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
// its own, so its events are kept in the memory of the replica that sent
// them (see standaloneLog). A client may take it up on any replica: there
// it goes on from the event the client names, and what the stream's
// earlier replica sent meanwhile is not replayed.

// EventRecords keeps the events of stateful sessions' response streams
// (a store.Store does).
type EventRecords interface {
	AppendMCPEvents(ctx context.Context, events ...store.MCPEvent) ([]store.MCPEvent, error)
	MCPEventsFrom(ctx context.Context, session, stream string, index int) ([]store.MCPEvent, error)
}

// primeDelay is how long a stream's priming event waits to be written
// with the stream's next event, in one transaction, before it is written
// alone. Each request of a stateful session is a stream with a priming
// event (protocol 2025-11-25) and, most often soon after, its answer:
// written together they cost one round trip to the database, not two.
// A stream that runs longer has its priming event written by then, so
// that a client may resume it from any replica.
const primeDelay = time.Second

// durableEvents is the mcp.EventStore of the stateful endpoint with
// Options.Sessions.
type durableEvents struct {
	records EventRecords
	log     *slog.Logger
	local   standaloneLog // the standalone streams'

	mu     sync.Mutex
	primes map[streamKey]*prime // the priming events not written yet
	delay  time.Duration        // primeDelay; shorter in tests
}

// streamKey names a stream of a session, by their keys in the store.
type streamKey struct{ session, stream string }

// prime is a stream's priming event waiting for the stream's next event
// (see primeDelay). Whoever claims it writes it: the stream's next
// Append, a resumption of the stream (After), its timer, or a drain.
type prime struct {
	event store.MCPEvent
	timer *time.Timer
	taken bool // claimed; guarded by durableEvents.mu
	// written is closed once the one that claimed it has written it, or
	// failed to.
	written chan struct{}
}

func newDurableEvents(records EventRecords, log *slog.Logger) *durableEvents {
	return &durableEvents{records: records, log: log, primes: map[streamKey]*prime{}, delay: primeDelay}
}

// eventSession is the key a session's events are kept under: a digest
// of its handle (the SDK's session id), bounded, and not the handle.
func eventSession(handle string) string {
	sum := sha256.Sum256([]byte(handle))
	return hex.EncodeToString(sum[:])
}

// Open implements mcp.EventStore. A stream of a request needs nothing
// before its first event.
func (d *durableEvents) Open(_ context.Context, session, stream string) error {
	if stream == "" {
		d.local.open(session)
	}
	return nil
}

// Append implements mcp.EventStore. The SDK appends a stream's events in
// order (under the stream's lock), from the one replica that serves the
// stream, beginning at its Open: so the index the store gives each, the
// stream's next, is the one the SDK puts in its event id. A priming event
// (no data) waits for the stream's next event, up to primeDelay.
func (d *durableEvents) Append(ctx context.Context, session, stream string, data []byte) error {
	if stream == "" {
		d.local.append(session, data)
		return nil
	}
	key := streamKey{eventSession(session), stream}
	e := store.MCPEvent{Session: key.session, Stream: stream, Data: data}
	if len(data) == 0 {
		d.deferPrime(key, e)
		return nil
	}
	events := []store.MCPEvent{e}
	if p := d.waiting(key); p != nil {
		if d.claim(p) {
			events = []store.MCPEvent{p.event, e}
			defer d.done(key, p)
		} else {
			<-p.written // by its timer: it comes first
		}
	}
	_, err := d.records.AppendMCPEvents(ctx, events...)
	return err
}

// deferPrime keeps a stream's priming event e for its next event, and
// writes it alone after primeDelay if nothing has taken it by then.
func (d *durableEvents) deferPrime(key streamKey, e store.MCPEvent) {
	p := &prime{event: e, written: make(chan struct{})}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.primes[key] = p
	p.timer = time.AfterFunc(d.delay, func() { d.writePrime(key, p) })
}

// waiting returns the stream's priming event not written yet, if any.
func (d *durableEvents) waiting(key streamKey) *prime {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.primes[key]
}

// claim takes p for the caller to write, and reports whether it did: it
// is false when another has taken p, and p.written then closes once that
// one has written it.
func (d *durableEvents) claim(p *prime) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p.taken {
		return false
	}
	p.taken = true
	p.timer.Stop()
	return true
}

// done ends p once the one that claimed it has written it (or failed to):
// it is no longer waiting.
func (d *durableEvents) done(key streamKey, p *prime) {
	d.mu.Lock()
	if d.primes[key] == p {
		delete(d.primes, key)
	}
	d.mu.Unlock()
	close(p.written)
}

// writePrime writes p alone, once: at its timer, when its stream is
// resumed (After) or when the replica drains. If another has taken it, it
// waits until that one has written it.
func (d *durableEvents) writePrime(key streamKey, p *prime) {
	if !d.claim(p) {
		<-p.written
		return
	}
	defer d.done(key, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.records.AppendMCPEvents(ctx, p.event); err != nil {
		d.log.Warn("mcpserver: storing a stream's priming event failed", "err", err)
	}
}

// flushPrimes writes now every priming event still waiting: the replica
// is going away, and a client may resume those streams on another.
func (d *durableEvents) flushPrimes() {
	d.mu.Lock()
	waiting := maps.Clone(d.primes)
	d.mu.Unlock()
	for key, p := range waiting {
		d.writePrime(key, p)
	}
}

// After implements mcp.EventStore: the events of the stream after index,
// all of them or, when any was deleted, mcp.ErrEventsPurged. The event at
// index is read too, so that a stream whose every event after it was
// deleted is told apart from one that has none yet.
func (d *durableEvents) After(ctx context.Context, session, stream string, index int) iter.Seq2[[]byte, error] {
	if stream == "" {
		events := d.local.after(session, index)
		return func(yield func([]byte, error) bool) {
			for _, e := range events {
				if !yield(e, nil) {
					return
				}
			}
		}
	}
	return func(yield func([]byte, error) bool) {
		from := max(index, 0)
		// The stream's replica resumes a stream whose answer has not
		// come yet: its priming event is written first, so that it is
		// read.
		key := streamKey{eventSession(session), stream}
		if p := d.waiting(key); p != nil {
			d.writePrime(key, p)
		}
		evs, err := d.records.MCPEventsFrom(ctx, key.session, stream, from)
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
func (d *durableEvents) SessionClosed(_ context.Context, session string) error {
	d.local.closed(session)
	return nil
}

// The bounds of the events of one copy's standalone stream kept for its
// resumption: the oldest go first.
const (
	maxStandaloneEvents = 256
	maxStandaloneBytes  = 1 << 20
)

// standaloneLog keeps the events of the standalone streams of this
// replica's copies of sessions, each under the index the SDK gave it in
// its event id. The SDK numbers a stream's events on from the event id a
// client resumes it with, which another replica may have given: the log
// then starts again at that index, so that every event it keeps is found
// under the id the client saw, and a resumption from an event it does not
// hold — another replica's, or one no longer kept — is answered with the
// stream going on from there, never refused (a refusal ends the Go SDK
// client's whole session). The events of a standalone stream are
// notifications: a list changed, a resource updated, a log message.
type standaloneLog struct {
	mu       sync.Mutex
	sessions map[string]*standaloneEvents
}

// standaloneEvents is one copy's standalone stream: events[i] has the
// index first+i; size is their bytes.
type standaloneEvents struct {
	first  int
	events [][]byte
	size   int
}

func (l *standaloneLog) get(session string) *standaloneEvents {
	if l.sessions == nil {
		l.sessions = map[string]*standaloneEvents{}
	}
	e := l.sessions[session]
	if e == nil {
		e = &standaloneEvents{}
		l.sessions[session] = e
	}
	return e
}

func (l *standaloneLog) open(session string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.get(session)
}

func (l *standaloneLog) append(session string, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.get(session)
	e.events = append(e.events, data)
	e.size += len(data)
	n := 0
	for len(e.events)-n > maxStandaloneEvents || (e.size > maxStandaloneBytes && n < len(e.events)) {
		e.size -= len(e.events[n])
		n++
	}
	e.events = slices.Delete(e.events, 0, n)
	e.first += n
}

// after returns the events after index, or none when the log does not
// hold the event after it: it then starts again at that index.
func (l *standaloneLog) after(session string, index int) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.get(session)
	next := index + 1
	if next < e.first || next > e.first+len(e.events) {
		e.first, e.events, e.size = next, nil, 0
		return nil
	}
	return slices.Clone(e.events[next-e.first:])
}

func (l *standaloneLog) closed(session string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.sessions, session)
}
