package assistant

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// bus fans the store's notifications out to this process's live-update
// subscribers: one listener per process, whatever the number of
// subscribers. What subscribers send is read from the database (the run's
// event log, the run row, the approval); a notification only says when.
type bus struct {
	st  runLog
	log *slog.Logger

	// maxStreams is how many live-update subscribers one user may hold
	// at once (Options.MaxStreamsPerUser).
	maxStreams int

	// runChanged, when set, is told of every run whose row or held
	// session changed (the holder checks its hold). It must not block.
	runChanged func(runID string)

	mu      sync.Mutex
	rooms   map[string]*room                 // by run id
	feeds   map[string]map[*feedSub]struct{} // by owner
	streams map[string]int                   // held streams, by owner
}

func newBus(st runLog, log *slog.Logger, maxStreams int) *bus {
	return &bus{st: st, log: log, maxStreams: maxStreams,
		rooms: map[string]*room{}, feeds: map[string]map[*feedSub]struct{}{}, streams: map[string]int{}}
}

// errTooManyStreams refuses a live-update subscriber beyond
// Options.MaxStreamsPerUser.
var errTooManyStreams = httpx.Errorf(http.StatusTooManyRequests, "too_many_streams",
	"You have too many live updates open at once (streams, WebSockets or long-polls, in other tabs perhaps). Close one and try again.")

// holdStream counts one more live-update subscriber of owner — a stream,
// a WebSocket or a long-poll, for as long as it lasts — or refuses it with
// errTooManyStreams when owner already holds maxStreams in this process.
// release, called once the subscriber is gone, frees its place; calling it
// more than once frees it once.
func (b *bus) holdStream(owner string) (release func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streams[owner] >= b.maxStreams {
		return nil, errTooManyStreams
	}
	b.streams[owner]++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.streams[owner]--; b.streams[owner] <= 0 {
				delete(b.streams, owner)
			}
		})
	}, nil
}

// heldStreams is how many live-update subscribers owner holds here.
func (b *bus) heldStreams(owner string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.streams[owner]
}

// run consumes the store's notifications until their channel closes.
func (b *bus) run(updates <-chan store.Notification) {
	for n := range updates {
		b.dispatch(n)
	}
}

// dispatch hands one notification to the subscribers it concerns.
func (b *bus) dispatch(n store.Notification) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch n.Kind {
	case store.NotifyEvent:
		if r := b.rooms[n.RunID]; r != nil {
			r.eventAppended(n.Seq)
		}
		b.pokeFeeds(n.Owner, func(f *feedSub) { f.runChanged(n.RunID) })
	case store.NotifyHold:
		if b.runChanged != nil {
			b.runChanged(n.RunID)
		}
	case store.NotifyRun:
		if b.runChanged != nil {
			b.runChanged(n.RunID)
		}
		if r := b.rooms[n.RunID]; r != nil {
			r.statusChanged()
		}
		b.pokeFeeds(n.Owner, func(f *feedSub) { f.runChanged(n.RunID) })
	case store.NotifyApproval:
		b.pokeFeeds(n.Owner, func(f *feedSub) { f.approvalChanged(n.ApprovalID) })
	case store.NotifyDelta:
		if r := b.rooms[n.RunID]; r != nil {
			r.delta(n)
		}
	case store.NotifyResync:
		for _, r := range b.rooms {
			r.resynced()
			r.statusChanged()
		}
		b.pokeFeeds("", func(f *feedSub) { f.resync() })
	}
}

// pokeFeeds calls poke for the feeds of owner, or of everyone when owner
// is empty. The caller holds b.mu.
func (b *bus) pokeFeeds(owner string, poke func(*feedSub)) {
	if owner != "" {
		for f := range b.feeds[owner] {
			poke(f)
		}
		return
	}
	for _, subs := range b.feeds {
		for f := range subs {
			poke(f)
		}
	}
}

// joinRun subscribes to a run's updates; leave ends the subscription.
func (b *bus) joinRun(runID string) (_ *runSub, _ *room, leave func()) {
	sub := &runSub{poke: make(chan struct{}, 1), status: make(chan struct{}, 1), deltas: make(chan roomDelta, deltaQueue)}
	b.mu.Lock()
	r := b.rooms[runID]
	if r == nil {
		r = &room{runID: runID, st: b.st, subs: map[*runSub]struct{}{}}
		b.rooms[runID] = r
	}
	r.addLocked(sub)
	b.mu.Unlock()
	return sub, r, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if r.removeLocked(sub) == 0 {
			delete(b.rooms, runID)
		}
	}
}

// joinFeed subscribes to an owner's feed; leave ends the subscription.
func (b *bus) joinFeed(owner string) (_ *feedSub, leave func()) {
	f := &feedSub{poke: make(chan struct{}, 1), runs: map[string]struct{}{}, approvals: map[string]struct{}{}}
	b.mu.Lock()
	if b.feeds[owner] == nil {
		b.feeds[owner] = map[*feedSub]struct{}{}
	}
	b.feeds[owner][f] = struct{}{}
	b.mu.Unlock()
	return f, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.feeds[owner], f)
		if len(b.feeds[owner]) == 0 {
			delete(b.feeds, owner)
		}
	}
}

// subscribers counts this process's live-update subscribers.
func (b *bus) subscribers() (runs, feeds int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.rooms {
		runs += len(r.subs)
	}
	for _, f := range b.feeds {
		feeds += len(f)
	}
	return runs, feeds
}

// deltaQueue is how many deltas a subscriber may have waiting.
const deltaQueue = 8

// runSub is one subscriber of a run. Its channels hold one pending poke
// each (pokes coalesce), and a bounded queue of deltas; a delta that does
// not fit is dropped, which loses nothing: the committed message follows.
type runSub struct {
	poke   chan struct{}
	status chan struct{}
	deltas chan roomDelta
}

// roomDelta is a delta and where it stands among the run's events: the
// newest event announced before it. The store announces an event after
// the deltas published before it was committed, in order, so a
// subscriber that sends every event up to after before the delta, and a
// delta before any event announced after it, sends them in the order
// they happened: no delta follows the message it streamed.
type roomDelta struct {
	store.Notification
	after int64
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// room is a run's subscribers in this process, and a window of the run's
// latest events read once for all of them: a thousand subscribers cost one
// query per appended event, not a thousand.
type room struct {
	runID string
	st    runLog
	subs  map[*runSub]struct{} // guarded by bus.mu

	// gen counts the event notifications, and runGen the run's changes;
	// the bus bumps them without waiting for a subscriber that is reading
	// the database.
	gen    atomic.Int64
	runGen atomic.Int64
	// announced is the newest event announced, resyncs counts the times
	// notifications may have been lost (then every event in the log
	// counts as announced).
	announced atomic.Int64
	resyncs   atomic.Int64

	runMu   sync.Mutex // guards the run row, read once per change
	runSeen int64
	runRow  store.Run

	mu      sync.Mutex // guards what follows; held while reading the log
	init    bool
	seen    int64       // the gen the window is current for
	more    bool        // the last read was a full page
	covered int64       // every event after covered is in recent
	recent  []roomEvent // ascending
}

// roomEvent is an event and its Server-Sent Events frame, encoded once for
// every subscriber.
type roomEvent struct {
	store.Event
	frame []byte
}

// newRoomEvent encodes e's frame: "id: SEQ", "event: TYPE", "data: VIEW".
func newRoomEvent(e store.Event) roomEvent {
	data, _ := json.Marshal(viewEvent(e)) // always encodes
	frame := make([]byte, 0, len(data)+len(e.Type)+40)
	frame = fmt.Appendf(frame, "id: %d\nevent: %s\ndata: ", e.Seq, e.Type)
	frame = append(frame, data...)
	frame = append(frame, "\n\n"...)
	return roomEvent{Event: e, frame: frame}
}

func newRoomEvents(events []store.Event) []roomEvent {
	out := make([]roomEvent, len(events))
	for i, e := range events {
		out[i] = newRoomEvent(e)
	}
	return out
}

// roomWindow is how many of a run's latest events a room keeps.
const roomWindow = 512

// roomPage is how many events one read takes.
const roomPage = 500

func (r *room) addLocked(s *runSub) { r.subs[s] = struct{}{} }

func (r *room) removeLocked(s *runSub) int {
	delete(r.subs, s)
	return len(r.subs)
}

// eventAppended is the announcement of the event seq.
func (r *room) eventAppended(seq int64) {
	if seq > r.announced.Load() {
		r.announced.Store(seq) // only the bus, under its lock, stores
	}
	r.gen.Add(1)
	for s := range r.subs {
		signal(s.poke)
	}
}

// resynced says that announcements may have been lost.
func (r *room) resynced() {
	r.resyncs.Add(1)
	r.gen.Add(1)
	for s := range r.subs {
		signal(s.poke)
	}
}

func (r *room) statusChanged() {
	r.runGen.Add(1)
	for s := range r.subs {
		signal(s.status)
	}
}

func (r *room) delta(n store.Notification) {
	d := roomDelta{Notification: n, after: r.announced.Load()}
	for s := range r.subs {
		select {
		case s.deltas <- d:
		default:
		}
	}
}

// since returns the events after the sequence after up to upTo, and
// whether more follow them. It serves from the room's window when the window covers
// after, reading the log once per change for every subscriber; a
// subscriber further behind reads the log itself.
func (r *room) since(ctx context.Context, after, upTo int64) ([]roomEvent, bool, error) {
	events, more, err := r.read(ctx, after)
	if n := len(events); n > 0 && events[n-1].Seq > upTo {
		i := 0
		for i < n && events[i].Seq <= upTo {
			i++
		}
		events, more = events[:i], false
	}
	return events, more, err
}

// read returns the events after the sequence after, and whether more
// follow them.
func (r *room) read(ctx context.Context, after int64) ([]roomEvent, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen := r.gen.Load(); !r.init || r.more || r.seen != gen {
		from := r.lastSeq()
		if !r.init {
			from = after
		}
		events, err := r.st.ListEvents(ctx, r.runID, from, roomPage)
		if err != nil {
			return nil, false, err
		}
		if !r.init {
			r.covered, r.recent, r.init = after, nil, true
		}
		r.recent = append(r.recent, newRoomEvents(events)...)
		if n := len(r.recent); n > roomWindow {
			r.recent = append([]roomEvent(nil), r.recent[n-roomWindow:]...)
			r.covered = r.recent[0].Seq - 1
		}
		r.seen, r.more = gen, len(events) == roomPage
	}
	if after < r.covered {
		events, err := r.st.ListEvents(ctx, r.runID, after, roomPage)
		return newRoomEvents(events), len(events) == roomPage, err
	}
	i := 0
	for i < len(r.recent) && r.recent[i].Seq <= after {
		i++
	}
	return r.recent[i:], r.more, nil
}

// run returns the run's row, read once per change for every subscriber.
// A failed read is not kept: it may be the reader's own (its context
// ended), which must not end the other subscribers' streams; the next
// subscriber reads again.
func (r *room) run(ctx context.Context) (store.Run, error) {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	if gen := r.runGen.Load(); gen != r.runSeen || r.runRow.ID == "" {
		row, err := r.st.GetRun(ctx, r.runID)
		if err != nil {
			return store.Run{}, err
		}
		r.runRow, r.runSeen = row, gen
	}
	return r.runRow, nil
}

// lastSeq is the newest sequence the room has read. The caller holds r.mu.
func (r *room) lastSeq() int64 {
	if n := len(r.recent); n > 0 {
		return r.recent[n-1].Seq
	}
	return r.covered
}

// feedSub is one subscriber of an owner's feed: the runs and approvals
// that changed since it last looked.
type feedSub struct {
	poke chan struct{}

	mu        sync.Mutex
	runs      map[string]struct{}
	approvals map[string]struct{}
	all       bool // look at everything again
}

func (f *feedSub) runChanged(id string) {
	f.mu.Lock()
	f.runs[id] = struct{}{}
	f.mu.Unlock()
	signal(f.poke)
}

func (f *feedSub) approvalChanged(id string) {
	f.mu.Lock()
	if id == "" {
		f.all = true
	} else {
		f.approvals[id] = struct{}{}
	}
	f.mu.Unlock()
	signal(f.poke)
}

func (f *feedSub) resync() {
	f.mu.Lock()
	f.all = true
	f.mu.Unlock()
	signal(f.poke)
}

// take returns and clears what changed.
func (f *feedSub) take() (runs, approvals []string, all bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.runs {
		runs = append(runs, id)
	}
	for id := range f.approvals {
		approvals = append(approvals, id)
	}
	all = f.all
	clear(f.runs)
	clear(f.approvals)
	f.all = false
	return runs, approvals, all
}
