package assistant

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// The live-update transports (Options.Transport).
const (
	// TransportAuto offers Server-Sent Events, WebSocket and long-poll.
	TransportAuto = "auto"
	// TransportSSE is TransportAuto: the streams are on; clients choose.
	TransportSSE = "sse"
	// TransportLongPoll turns the streaming routes off (503, the URLs
	// stay) for proxies that buffer responses: clients long-poll
	// /events?after=SEQ&wait=30s.
	TransportLongPoll = "long-poll"
)

// Stream limits.
const (
	// writeTimeout bounds one write to a stream: a client that reads
	// nothing for that long is dropped.
	writeTimeout = 30 * time.Second
	// maxLongPoll is the longest ?wait of the long-poll.
	maxLongPoll = 60 * time.Second
	// feedCoalesce gathers the feed's changes before they are sent.
	feedCoalesce = 100 * time.Millisecond
)

var errStreamsOff = httpx.Errorf(http.StatusServiceUnavailable, "streaming_disabled",
	"Streaming is turned off on this server: long-poll /events?after=SEQ&wait=30s instead.")

// emitter writes one stream's messages, as SSE or WebSocket frames.
type emitter interface {
	// send writes one message without a sequence.
	send(event string, id int64, data any) error
	// events writes log events, at once.
	events(evs []roomEvent) error
}

// sseEmitter writes Server-Sent Events.
type sseEmitter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sseEmitter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no") // tell nginx not to buffer
	w.WriteHeader(http.StatusOK)
	return &sseEmitter{w: w, rc: http.NewResponseController(w)}
}

func (e *sseEmitter) send(event string, id int64, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	var buf strings.Builder
	if id > 0 {
		fmt.Fprintf(&buf, "id: %d\n", id)
	}
	fmt.Fprintf(&buf, "event: %s\ndata: %s\n\n", event, b)
	if _, err := io.WriteString(e.w, buf.String()); err != nil {
		return err
	}
	return e.rc.Flush()
}

// events writes the events' frames, encoded once for every subscriber, in
// one write and one flush.
func (e *sseEmitter) events(evs []roomEvent) error {
	_ = e.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	size := 0
	for _, ev := range evs {
		size += len(ev.frame)
	}
	buf := make([]byte, 0, size)
	for _, ev := range evs {
		buf = append(buf, ev.frame...)
	}
	if _, err := e.w.Write(buf); err != nil {
		return err
	}
	return e.rc.Flush()
}

// wsEmitter writes WebSocket text frames {"event","id","data"}.
type wsEmitter struct{ conn *websocket.Conn }

func (e *wsEmitter) send(event string, id int64, data any) error {
	msg := struct {
		Event string `json:"event"`
		ID    int64  `json:"id,omitempty"`
		Data  any    `json:"data"`
	}{event, id, data}
	_ = e.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	return e.conn.WriteJSON(msg)
}

func (e *wsEmitter) events(evs []roomEvent) error {
	for _, ev := range evs {
		if err := e.send(ev.Type, ev.Seq, viewEvent(ev.Event)); err != nil {
			return err
		}
	}
	return nil
}

// resumePoint is where a stream resumes: after the Last-Event-ID, else
// after ?after=, else from the start.
func resumePoint(r *http.Request) (int64, error) {
	s := r.Header.Get("Last-Event-ID")
	if s == "" {
		s = r.URL.Query().Get("after")
	}
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, httpx.Errorf(http.StatusBadRequest, "invalid_query", "Last-Event-ID and after must be a sequence number (0 or more).")
	}
	return n, nil
}

// streamRun sends the run's events after after, then every event, delta
// and status change as they happen, and a heartbeat when quiet, until ctx
// ends or a write fails. Each event goes once, in order: the cursor only
// moves forward.
func (rt *Runtime) streamRun(ctx context.Context, e emitter, run store.Run, after int64) error {
	sub, room, leave := rt.bus.joinRun(run.ID)
	defer leave()
	// Subscribed before the first read: nothing appended in between is
	// missed.
	if err := e.send("connected", 0, map[string]any{"runId": run.ID, "lastSeq": run.LastSeq}); err != nil {
		return err
	}
	cursor := after
	// flush sends the events after the cursor up to upTo.
	flush := func(upTo int64) error {
		for {
			events, more, err := room.since(ctx, cursor, upTo)
			if err != nil {
				return err
			}
			if len(events) > 0 {
				if err := e.events(events); err != nil {
					return err
				}
				cursor = events[len(events)-1].Seq
			}
			if !more || len(events) == 0 {
				return nil
			}
		}
	}
	// sendDelta sends a delta after the events announced before it.
	sendDelta := func(d roomDelta) error {
		if d.after > cursor {
			if err := flush(d.after); err != nil {
				return err
			}
		}
		return e.send("delta", 0, map[string]any{"runId": d.RunID, "messageSeq": d.MessageSeq, "text": d.Text})
	}
	sendDeltas := func() error {
		for {
			select {
			case d := <-sub.deltas:
				if err := sendDelta(d); err != nil {
					return err
				}
			default:
				return nil
			}
		}
	}
	// The log as it is: its events were appended before the subscription
	// heard of any, and deltas still on their way stream what follows
	// them.
	resyncs := room.resyncs.Load()
	if err := flush(math.MaxInt64); err != nil {
		return err
	}
	status := run.Status
	heartbeat := time.NewTicker(rt.o.Heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.poke:
			// The events announced so far, after the deltas queued before
			// their announcement: those stream text the events may
			// commit, and no delta follows its committed message. After
			// a resync, every event in the log counts as announced.
			upTo := room.announced.Load()
			if n := room.resyncs.Load(); n != resyncs {
				resyncs, upTo = n, math.MaxInt64
			}
			if err := sendDeltas(); err != nil {
				return err
			}
			if err := flush(upTo); err != nil {
				return err
			}
		case d := <-sub.deltas:
			if err := sendDelta(d); err != nil {
				return err
			}
		case <-sub.status:
			r, err := room.run(ctx)
			if err != nil {
				return err
			}
			if !r.DeletedAt.IsZero() {
				return e.send("status", 0, map[string]any{"runId": r.ID, "deleted": true})
			}
			if r.Status != status {
				status = r.Status
				if err := e.send("status", 0, viewRun(r)); err != nil {
					return err
				}
			}
		case <-heartbeat.C:
			if err := e.send("heartbeat", 0, map[string]any{}); err != nil {
				return err
			}
		}
		heartbeat.Reset(rt.o.Heartbeat)
	}
}

// streamContext ends when the request does or when the runtime closes its
// streams (at shutdown, so that the server's drain is not held open).
func (rt *Runtime) streamContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(rt.streams, cancel)
	return ctx, func() { stop(); cancel() }
}

// CloseStreams ends every live-update stream; register it with
// http.Server.RegisterOnShutdown.
func (rt *Runtime) CloseStreams() { rt.closeStreams() }

// streamRequest checks a request for a run's live updates, over either
// transport: the caller's own run, streams on, a valid resume point, and
// room for one more of the caller's streams (see bus.holdStream). It
// answers the request itself when one is not; otherwise the caller calls
// release when the stream ends.
func (rt *Runtime) streamRequest(w http.ResponseWriter, r *http.Request) (_ store.Run, after int64, release func(), ok bool) {
	run, ok := rt.ownRun(w, r)
	if !ok {
		return store.Run{}, 0, nil, false
	}
	if rt.o.Transport == TransportLongPoll {
		rt.fail(w, r, errStreamsOff)
		return store.Run{}, 0, nil, false
	}
	after, err := resumePoint(r)
	if err != nil {
		rt.fail(w, r, err)
		return store.Run{}, 0, nil, false
	}
	release, err = rt.bus.holdStream(run.Owner)
	if err != nil {
		rt.fail(w, r, err)
		return store.Run{}, 0, nil, false
	}
	return run, after, release, true
}

func (rt *Runtime) handleRunStream(w http.ResponseWriter, r *http.Request) {
	run, after, release, ok := rt.streamRequest(w, r)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := rt.streamContext(r)
	defer cancel()
	err := rt.streamRun(ctx, newSSE(w), run, after)
	rt.streamEnded(ctx, r, err)
}

// upgrader upgrades the WebSocket route. Its origin check refuses a browser
// page of another origin, which with cookie sign-in is the cross-site
// request forgery of WebSockets: the page's scheme, host and port must be
// exactly those of Usher's public URL, whose MCP endpoint is MCPURL (the
// upgrader's default compares the host alone, so an http page passed for
// an https one).
func (rt *Runtime) upgrader() *websocket.Upgrader {
	return &websocket.Upgrader{
		ReadBufferSize: 1024, WriteBufferSize: 4096,
		CheckOrigin: func(r *http.Request) bool { return httpx.SameOrigin(r, rt.o.MCPURL) },
	}
}

func (rt *Runtime) handleRunWebSocket(w http.ResponseWriter, r *http.Request) {
	run, after, release, ok := rt.streamRequest(w, r)
	if !ok {
		return
	}
	defer release()
	conn, err := rt.upgrader().Upgrade(hijacker{w, http.NewResponseController(w)}, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer conn.Close()
	ctx, cancel := rt.streamContext(r)
	defer cancel()
	// The client sends nothing; reading notices when it goes away.
	conn.SetReadLimit(1024)
	go func() {
		defer cancel()
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	err = rt.streamRun(ctx, &wsEmitter{conn: conn}, run, after)
	rt.streamEnded(ctx, r, err)
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
}

// hijacker lets the WebSocket upgrader take over a connection whose
// ResponseWriter is wrapped (by the request metrics, say): the
// ResponseController finds the hijacker under the wrappers.
type hijacker struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) { return h.rc.Hijack() }

// streamEnded logs why a stream ended, unless the client or the server
// simply closed it (ctx, the stream's context, ended): a stream the server
// ends on its own leaves its subscriber to reconnect.
func (rt *Runtime) streamEnded(ctx context.Context, r *http.Request, err error) {
	if err != nil && ctx.Err() == nil {
		rt.log.Debug("assistant: a live-update stream ended", "path", r.URL.Path, "err", err)
	}
}

// longPoll answers GET /events?after=SEQ&wait=D: the events after SEQ, or,
// when there are none yet, the first ones appended within D.
func (rt *Runtime) longPoll(w http.ResponseWriter, r *http.Request, run store.Run, after int64, wait time.Duration) {
	release, err := rt.bus.holdStream(run.Owner)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	defer release()
	sub, room, leave := rt.bus.joinRun(run.ID)
	defer leave()
	ctx, cancel := rt.streamContext(r)
	defer cancel()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		events, more, err := room.read(ctx, after)
		if err != nil && ctx.Err() == nil {
			rt.fail(w, r, err)
			return
		}
		if len(events) > 0 || ctx.Err() != nil {
			plain := make([]store.Event, len(events))
			for i, e := range events {
				plain[i] = e.Event
			}
			httpx.WriteJSON(w, http.StatusOK, map[string]any{"events": nonNilViews(viewEvents(plain)), "hasMore": more})
			return
		}
		select {
		case <-ctx.Done():
		case <-timer.C:
			httpx.WriteJSON(w, http.StatusOK, map[string]any{"events": []EventView{}, "hasMore": false})
			return
		case <-sub.poke:
		}
	}
}

func (rt *Runtime) handleFeed(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	if rt.o.Transport == TransportLongPoll {
		rt.fail(w, r, errStreamsOff)
		return
	}
	release, err := rt.bus.holdStream(owner)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	defer release()
	ctx, cancel := rt.streamContext(r)
	defer cancel()
	f, leave := rt.bus.joinFeed(owner)
	defer leave()
	e := newSSE(w)
	err = e.send("connected", 0, map[string]any{})
	heartbeat := time.NewTicker(rt.o.Heartbeat)
	defer heartbeat.Stop()
	for err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
			continue
		case <-heartbeat.C:
			err = e.send("heartbeat", 0, map[string]any{})
			continue
		case <-f.poke:
		}
		// Gather what else changes in a moment into the same sends.
		select {
		case <-ctx.Done():
		case <-time.After(feedCoalesce):
		}
		err = rt.sendFeed(ctx, e, owner, f)
	}
	rt.streamEnded(ctx, r, err)
}

// sendFeed sends what changed for the owner: each changed run, and each
// changed approval (or all pending ones, when everything may have).
func (rt *Runtime) sendFeed(ctx context.Context, e emitter, owner string, f *feedSub) error {
	runs, approvals, all := f.take()
	for _, id := range runs {
		r, err := rt.st.GetRun(ctx, id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && r.Owner != owner) {
			continue
		}
		if err != nil {
			return err
		}
		if !r.DeletedAt.IsZero() {
			if err := e.send("run", 0, map[string]any{"runId": r.ID, "deleted": true}); err != nil {
				return err
			}
			continue
		}
		if err := e.send("run", 0, viewRun(r)); err != nil {
			return err
		}
	}
	if all {
		return e.send("approvals", 0, map[string]any{"refresh": true})
	}
	for _, id := range approvals {
		a, err := rt.st.GetApproval(ctx, id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && a.Binding.Principal != owner) {
			continue
		}
		if err != nil {
			return err
		}
		if err := e.send("approval", 0, map[string]any{"id": a.ID, "status": a.Status, "runId": a.Binding.RunID, "tool": a.Binding.Tool}); err != nil {
			return err
		}
	}
	return nil
}
