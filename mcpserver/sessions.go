//lint:file-ignore SA1019 Logging is deprecated as of protocol 2026-07-28 (SEP-2577) but works during its deprecation window: a session of the older protocols keeps its log level.

package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/seal"
	"github.com/usherhq/usher/store"
)

// A stateful session that any replica serves. Its Mcp-Session-Id is a
// handle sealed under Options.Secret (which every replica shares): it
// names the session's record in the database, and no one can forge one or
// read the id inside. The record holds what the session's handshake
// settled (the protocol version, the client's capabilities and
// information) and its log level. A replica that meets a session it does
// not hold restores it from the record, through the SDK's own session
// state (mcp.ServerSessionOptions.State), and keeps that copy until it
// has been idle for Options.SessionTimeout. Every request of a session
// reads its record, so that a session deleted on one replica ends on all,
// and a copy whose record has changed since it was made (another replica
// set the log level) is brought to it (see sync).

// SessionStore keeps the records of stateful sessions, and passes a
// client's answers to every replica (a store.Store does).
type SessionStore interface {
	CreateMCPSession(ctx context.Context, s store.MCPSession) (store.MCPSession, error)
	GetMCPSession(ctx context.Context, id string) (store.MCPSession, error)
	UpdateMCPSessionState(ctx context.Context, id string, old, state []byte) error
	DeleteMCPSession(ctx context.Context, id string) error
	// Publish and Updates carry store.NotifyMCPAnswer.
	Publish(ctx context.Context, n store.Notification) error
	Updates(ctx context.Context) (<-chan store.Notification, error)
	// EventRecords keeps the events of the sessions' response streams,
	// which any replica replays to a client resuming one.
	EventRecords
}

// DefaultSessionLifetime is the default of Options.SessionLifetime.
const DefaultSessionLifetime = 24 * time.Hour

// maxSessionHandle bounds an Mcp-Session-Id that is opened.
const maxSessionHandle = 256

// sessionState is the state a session's record holds: the SDK's, the
// resources the session is subscribed to (each copy of the session
// subscribes to them on its replica, so that an update reaches the
// client's stream wherever it is held), and whether the client declared
// roots, which the SDK's capabilities keep in a field that JSON skips.
type sessionState struct {
	mcp.ServerSessionState
	Subscriptions []string              `json:"subscriptions,omitempty"`
	Roots         *mcp.RootCapabilities `json:"roots,omitempty"`
}

// maxChangeAttempts bounds the compare-and-swaps of a change to a
// session's record that other replicas' changes overtake.
const maxChangeAttempts = 8

// sessionHandle is what a session's Mcp-Session-Id seals.
type sessionHandle struct {
	ID string `json:"i"`
}

// Refusals of requests of a session.
var (
	// errSessionNotFound answers a handle that is not Usher's, altered,
	// expired, of a session that has ended, or of another principal's
	// session: the same answer for each.
	errSessionNotFound = httpx.Errorf(http.StatusNotFound, "session_not_found", "The session was not found; start a new one.")
	// errSessionsUnavailable answers when the session's record cannot
	// be read.
	errSessionsUnavailable = httpx.Errorf(http.StatusServiceUnavailable, "unavailable", "The session cannot be served at the moment; try again.")
)

// durableSessions serves the stateful endpoint when sessions are kept in
// a SessionStore: the SDK's handler serves the sessions it opened (their
// handshake came to this replica), and the sessions restored here are
// served through transports of their own.
type durableSessions struct {
	s       *Server
	store   SessionStore
	handles *seal.Sealer
	ids     *seal.Sealer // seals the ids of the requests the sessions send (see sealRequests)
	sdk     http.Handler // the SDK's stateful handler
	events  mcp.EventStore

	self     string       // this replica's name in the answers it publishes
	injector http.Handler // delivers an answer another replica received (see deliver)
	stop     context.CancelFunc
	answers  sync.WaitGroup // the goroutine that hears the answers (see listen)

	mu       sync.Mutex
	native   map[string][]byte           // by handle: the sessions the SDK's handler holds, and the state each was made with
	restored map[string]*restoredSession // by handle
	held     map[string]string           // by record id: the handle of a session held here
	watchers sync.WaitGroup              // one per session held, until it closes
}

// restoredSession is a session restored on this replica.
type restoredSession struct {
	session   *mcp.ServerSession
	transport *mcp.StreamableServerTransport
	state     []byte // the record's state it was made with
	// Guarded by durableSessions.mu.
	refs  int         // requests being served
	idle  *time.Timer // closes the session once idle
	ended bool
}

func newDurableSessions(s *Server, st SessionStore, secret []byte) (*durableSessions, error) {
	handles, err := seal.NewRotated(secret, s.opts.PreviousSecrets, "usher/mcp/v1", "usher/mcp/session-id", maxSessionHandle)
	if err != nil {
		return nil, err
	}
	ids, err := newIDSealer(secret, s.opts.PreviousSecrets...)
	if err != nil {
		return nil, err
	}
	d := &durableSessions{s: s, store: st, handles: handles, ids: ids, self: rand.Text(),
		native: map[string][]byte{}, restored: map[string]*restoredSession{}, held: map[string]string{}}
	d.injector = auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		c, _ := CallerFromContext(ctx)
		return &auth.TokenInfo{Scopes: []string{scope}, Expiration: time.Now().Add(time.Minute), UserID: c.Subject,
			Extra: map[string]any{tokenInfoKey: c}}, nil
	}, &auth.RequireBearerTokenOptions{Scopes: []string{scope}})(http.HandlerFunc(d.serveHeld))
	return d, nil
}

// newHandle is the SDK's ServerOptions.GetSessionID: a new session's
// sealed handle, valid for Options.SessionLifetime.
func (d *durableSessions) newHandle() string {
	h, err := d.handles.Seal(sessionHandle{ID: rand.Text()}, d.s.opts.Now().Add(d.s.opts.SessionLifetime))
	if err != nil {
		return "" // unreachable: the SDK then keeps no session
	}
	return h
}

// open returns the session id a handle seals, or false.
func (d *durableSessions) open(handle string) (string, bool) {
	var h sessionHandle
	if err := d.handles.Open(handle, d.s.opts.Now(), &h); err != nil || h.ID == "" {
		return "", false
	}
	return h.ID, true
}

// ServeHTTP serves a request of the stateful endpoint. One without a
// session (a handshake) goes to the SDK's handler, which opens the session
// under a new handle (see record); one of a session is served by the copy
// of it this replica holds, restored from its record if there is none.
func (d *durableSessions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	handle := r.Header.Get("Mcp-Session-Id")
	if handle == "" {
		d.sdk.ServeHTTP(w, r)
		return
	}
	rec, ok := d.lookup(w, r, handle)
	if !ok {
		return
	}
	if r.Method == http.MethodDelete {
		d.delete(w, r, handle, rec)
		return
	}
	if r.Method == http.MethodPost {
		if !d.openAnswer(w, r, rec) {
			return
		}
		d.passOn(r, rec)
	}
	w = d.sealRequests(w, rec)
	d.mu.Lock()
	state, native := d.native[handle]
	if rs := d.restored[handle]; rs != nil && !rs.ended {
		state = rs.state
	}
	d.mu.Unlock()
	if state != nil && !bytes.Equal(state, rec.State) {
		d.sync(r.Context(), handle, state, rec)
	}
	if native {
		d.sdk.ServeHTTP(w, r)
		return
	}
	rs, made, err := d.restore(r.Context(), handle, rec)
	if err != nil {
		d.s.log.ErrorContext(r.Context(), "mcpserver: restoring a session failed", "err", err)
		httpx.WriteError(w, r, d.s.log, errSessionsUnavailable)
		return
	}
	defer d.release(rs)
	if !bytes.Equal(made, rec.State) {
		// A new copy subscribes to the record's resources.
		d.sync(r.Context(), handle, made, rec)
	}
	rs.transport.ServeHTTP(w, r)
}

// lookup returns the record of the session handle names, if it is the
// caller's and has not ended; otherwise it answers the request.
func (d *durableSessions) lookup(w http.ResponseWriter, r *http.Request, handle string) (store.MCPSession, bool) {
	id, ok := d.open(handle)
	if !ok {
		d.s.log.InfoContext(r.Context(), "mcpserver: a session handle was refused")
		httpx.WriteError(w, r, d.s.log, errSessionNotFound)
		return store.MCPSession{}, false
	}
	rec, err := d.store.GetMCPSession(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		d.forget(handle)
		httpx.WriteError(w, r, d.s.log, errSessionNotFound)
		return store.MCPSession{}, false
	case err != nil:
		d.s.log.ErrorContext(r.Context(), "mcpserver: reading a session failed", "err", err)
		httpx.WriteError(w, r, d.s.log, errSessionsUnavailable)
		return store.MCPSession{}, false
	}
	c, ok := callerOf(auth.TokenInfoFromContext(r.Context()))
	if !ok || c.Subject != rec.Principal || !rec.Active(d.s.opts.Now()) {
		d.s.log.InfoContext(r.Context(), "mcpserver: a session of another principal, or ended, was refused")
		httpx.WriteError(w, r, d.s.log, errSessionNotFound)
		return store.MCPSession{}, false
	}
	return rec, true
}

// delete ends the session on every replica: its record first, then the
// copy this replica holds. The others' copies end at their next request.
func (d *durableSessions) delete(w http.ResponseWriter, r *http.Request, handle string, rec store.MCPSession) {
	if err := d.store.DeleteMCPSession(r.Context(), rec.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		d.s.log.ErrorContext(r.Context(), "mcpserver: deleting a session failed", "err", err)
		httpx.WriteError(w, r, d.s.log, errSessionsUnavailable)
		return
	}
	d.forget(handle)
	w.WriteHeader(http.StatusNoContent)
}

// forget closes the copies of the session this replica holds, if any:
// the SDK's handler holds one whose record was never written, too.
func (d *durableSessions) forget(handle string) {
	d.mu.Lock()
	rs := d.restored[handle]
	d.mu.Unlock()
	if rs != nil {
		_ = rs.session.Close()
	}
	if ss := d.nativeSession(handle); ss != nil {
		_ = ss.Close()
	}
}

// nativeSession returns the session handle of the SDK's handler, or nil.
func (d *durableSessions) nativeSession(handle string) *mcp.ServerSession {
	for ss := range d.s.sdk.Sessions() {
		if ss.ID() == handle {
			return ss
		}
	}
	return nil
}

// restore returns this replica's copy of the session, made from rec if
// there is none, with a request counted on it (see release), and the
// state the copy has: a new copy is not yet subscribed to the record's
// resources.
func (d *durableSessions) restore(ctx context.Context, handle string, rec store.MCPSession) (*restoredSession, []byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rs := d.restored[handle]; rs != nil && !rs.ended {
		rs.refs++
		rs.idle.Stop()
		return rs, rs.state, nil
	}
	var st sessionState
	if err := json.Unmarshal(rec.State, &st); err != nil {
		return nil, nil, err
	}
	st.Subscriptions = nil
	if st.InitializeParams != nil && st.InitializeParams.Capabilities != nil {
		st.InitializeParams.Capabilities.RootsV2 = st.Roots
	}
	made, err := json.Marshal(st)
	if err != nil {
		return nil, nil, err
	}
	// The record is written once the handshake is answered: the client
	// has been told it is initialized, or is telling a replica so.
	st.InitializedParams = &mcp.InitializedParams{}
	t := &mcp.StreamableServerTransport{SessionID: handle, EventStore: d.events}
	ss, err := d.s.sdk.Connect(ctx, t, &mcp.ServerSessionOptions{State: &st.ServerSessionState})
	if err != nil {
		return nil, nil, err
	}
	rs := &restoredSession{session: ss, transport: t, state: made, refs: 1}
	rs.idle = time.AfterFunc(d.s.opts.SessionTimeout, func() { _ = ss.Close() })
	rs.idle.Stop()
	d.restored[handle] = rs
	d.held[rec.ID] = handle
	d.watch(ss, func() {
		if d.restored[handle] == rs {
			delete(d.restored, handle)
		}
		rs.ended = true
		rs.idle.Stop()
		d.forgetHeldLocked(rec.ID, handle)
	})
	return rs, made, nil
}

// sync brings this replica's copy of the session, whose state is from,
// to its record, which another replica has changed, without closing the
// copy, whose streams and calls go on: the copy is told the record's log
// level and subscriptions by requests of its own (logging/setLevel,
// resources/subscribe and resources/unsubscribe), as if the client had
// sent them here. Each is decided and recorded as the client's would be.
func (d *durableSessions) sync(ctx context.Context, handle string, from []byte, rec store.MCPSession) {
	var was, is sessionState
	if json.Unmarshal(from, &was) != nil || json.Unmarshal(rec.State, &is) != nil {
		return
	}
	ask := func(method string, params map[string]any) {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "usher-sync-" + rand.Text(), "method": method, "params": params})
		d.inject(ctx, handle, rec.Principal, body)
	}
	if is.LogLevel != "" && is.LogLevel != was.LogLevel {
		ask("logging/setLevel", map[string]any{"level": is.LogLevel})
	}
	for _, uri := range is.Subscriptions {
		if !slices.Contains(was.Subscriptions, uri) {
			ask("resources/subscribe", map[string]any{"uri": uri})
		}
	}
	for _, uri := range was.Subscriptions {
		if !slices.Contains(is.Subscriptions, uri) {
			ask("resources/unsubscribe", map[string]any{"uri": uri})
		}
	}
	d.setState(handle, from, rec.State)
}

// setState sets the state of this replica's copy of the session to state,
// if it is from.
func (d *durableSessions) setState(handle string, from, state []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.native[handle]; ok && bytes.Equal(old, from) {
		d.native[handle] = state
	}
	if rs := d.restored[handle]; rs != nil && bytes.Equal(rs.state, from) {
		rs.state = state
	}
}

// release ends a request's use of a restored session: the last one starts
// its idle time.
func (d *durableSessions) release(rs *restoredSession) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rs.refs--; rs.refs == 0 && !rs.ended {
		rs.idle.Reset(d.s.opts.SessionTimeout)
	}
}

// watch runs gone, under d.mu, once ss has closed.
func (d *durableSessions) watch(ss *mcp.ServerSession, gone func()) {
	d.watchers.Add(1)
	go func() {
		defer d.watchers.Done()
		_ = ss.Wait()
		d.mu.Lock()
		defer d.mu.Unlock()
		gone()
	}()
}

// record writes the record of a session whose handshake the SDK's handler
// has just answered, before the answer leaves: from then on any replica
// can serve the session. A session whose record cannot be written is
// closed, and the handshake fails.
func (d *durableSessions) record(ctx context.Context, c Caller, req *mcp.ServerRequest[*mcp.InitializeParams], res *mcp.InitializeResult) error {
	ss := req.Session
	handle := ss.ID()
	id, ok := d.open(handle)
	if !ok || req.Params == nil {
		return errors.New("the session has no handle of Usher's")
	}
	st := sessionState{ServerSessionState: mcp.ServerSessionState{InitializeParams: req.Params, NegotiatedProtocolVersion: res.ProtocolVersion}}
	if req.Params.Capabilities != nil {
		st.Roots = req.Params.Capabilities.RootsV2
	}
	state, err := json.Marshal(st)
	if err == nil {
		now := d.s.opts.Now()
		_, err = d.store.CreateMCPSession(ctx, store.MCPSession{
			ID: id, Principal: c.Subject, State: state, CreatedAt: now, ExpiresAt: now.Add(d.s.opts.SessionLifetime),
		})
	}
	if err != nil {
		// The SDK's handler holds the session until a request of it
		// finds no record (see forget).
		if errors.Is(err, store.ErrInvalid) {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the session's handshake is too large to be kept"}
		}
		d.s.log.ErrorContext(ctx, "mcpserver: recording a session failed", "err", err)
		return unrecorded(err, "the session could not be recorded", "The session was not started: "+outageText)
	}
	d.mu.Lock()
	d.native[handle] = state
	d.held[id] = handle
	d.mu.Unlock()
	d.watch(ss, func() {
		delete(d.native, handle)
		d.forgetHeldLocked(id, handle)
	})
	return nil
}

// change applies fn to the state in the record of the session ss, by
// compare-and-swap, and tells the other replicas, whose copies of the
// session are brought to it (see sync). This replica's copy has made the
// change already.
func (d *durableSessions) change(ctx context.Context, ss *mcp.ServerSession, fn func(*sessionState)) error {
	handle := ss.ID()
	id, ok := d.open(handle)
	if !ok {
		return errors.New("the session has no handle of Usher's")
	}
	for range maxChangeAttempts {
		rec, err := d.store.GetMCPSession(ctx, id)
		if err != nil {
			return err
		}
		var st sessionState
		if err := json.Unmarshal(rec.State, &st); err != nil {
			return err
		}
		fn(&st)
		st.InitializedParams = nil
		state, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if bytes.Equal(state, rec.State) {
			d.setState(handle, rec.State, state)
			return nil
		}
		err = d.store.UpdateMCPSessionState(ctx, id, rec.State, state)
		if errors.Is(err, store.ErrConflict) {
			continue // another change came first: apply fn to it
		}
		if err != nil {
			return err
		}
		d.setState(handle, rec.State, state)
		if err := d.store.Publish(ctx, store.Notification{Kind: store.NotifyMCPSession, Session: id, From: d.self}); err != nil {
			// The other replicas' copies are brought to the record at
			// their next request of the session.
			d.s.log.WarnContext(ctx, "mcpserver: telling other replicas of a session's change failed", "err", err)
		}
		return nil
	}
	return errors.New("the session's record kept changing")
}

// refresh brings this replica's copy of the session id, if it holds one,
// to its record, which another replica has changed.
func (d *durableSessions) refresh(ctx context.Context, id string) {
	d.mu.Lock()
	handle, ok := d.held[id]
	var from []byte
	if ok {
		from = d.native[handle]
		if rs := d.restored[handle]; rs != nil && !rs.ended {
			from = rs.state
		}
	}
	d.mu.Unlock()
	if from == nil {
		return
	}
	rec, err := d.store.GetMCPSession(ctx, id)
	if err != nil {
		return // ended; its next request finds so
	}
	if !bytes.Equal(from, rec.State) {
		d.sync(ctx, handle, from, rec)
	}
}

// setLevel sets a session's log level and, for a session kept in
// Options.Sessions, records it, for the other replicas.
func (s *Server) setLevel(ctx context.Context, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	res, err := next(ctx, method, req)
	r, ok := req.(*mcp.ServerRequest[*mcp.SetLoggingLevelParams])
	if err != nil || !ok || s.durable == nil || r.Session == nil || r.Session.ID() == "" || r.Params == nil {
		return res, err
	}
	if err := s.durable.change(ctx, r.Session, func(st *sessionState) { st.LogLevel = r.Params.Level }); err != nil {
		s.log.ErrorContext(ctx, "mcpserver: recording a session's log level failed", "err", err)
		return nil, unrecorded(err, "the log level could not be recorded", "The log level could not be recorded: "+outageText)
	}
	return res, nil
}

// forgetHeldLocked forgets the record id of a session once no copy of it
// is held here. The caller holds d.mu.
func (d *durableSessions) forgetHeldLocked(id, handle string) {
	if _, ok := d.native[handle]; ok {
		return
	}
	if _, ok := d.restored[handle]; ok {
		return
	}
	delete(d.held, id)
}

// A server-to-client request (an upstream's sampling or elicitation,
// relayed) goes to the client on the response stream of the call that
// caused it, from the replica that serves the call, which waits for the
// answer. The client answers in a POST of its own, which may reach
// another replica: that one passes the answer on to every replica
// (store.NotifyMCPAnswer; LISTEN/NOTIFY on PostgreSQL), and each that
// holds a copy of the session delivers it to its copy, as if the POST had
// come to it. Only the copy that sent the request has a use for it: the
// others ignore an answer to a request they did not send.

// passOn publishes the body of a POST that answers a request of the
// session (a JSON-RPC response), for the replica that sent the request.
func (d *durableSessions) passOn(r *http.Request, rec store.MCPSession) {
	if r.Body == nil {
		return
	}
	body, err := io.ReadAll(r.Body) // in memory: readBody read it
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || !isAnswer(body) {
		return
	}
	if len(body) > store.MaxMCPAnswer {
		d.s.log.WarnContext(r.Context(), "mcpserver: an answer too large to pass on to other replicas", "bytes", len(body))
		return
	}
	n := store.Notification{Kind: store.NotifyMCPAnswer, Session: rec.ID, Owner: rec.Principal, From: d.self, Text: string(body)}
	if err := d.store.Publish(r.Context(), n); err != nil {
		d.s.log.ErrorContext(r.Context(), "mcpserver: passing an answer on to other replicas failed", "err", err)
	}
}

// isAnswer reports whether body is one JSON-RPC response.
func isAnswer(body []byte) bool {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	return json.Unmarshal(body, &m) == nil && m.Method == nil && len(m.ID) > 0 && (m.Result != nil || m.Error != nil)
}

// start starts hearing the answers other replicas pass on; stop ends it.
func (d *durableSessions) start() error {
	ctx, cancel := context.WithCancel(context.Background())
	updates, err := d.store.Updates(ctx)
	if err != nil {
		cancel()
		return err
	}
	d.stop = cancel
	d.answers.Add(1)
	go func() {
		defer d.answers.Done()
		for n := range updates {
			switch {
			case n.From == d.self:
			case n.Kind == store.NotifyMCPAnswer:
				d.deliver(ctx, n)
			case n.Kind == store.NotifyMCPSession:
				d.refresh(ctx, n.Session)
			}
		}
	}()
	return nil
}

// deliver hands an answer another replica received to this replica's
// copy of its session, if it holds one. The replica that received it has
// checked the session and its principal.
func (d *durableSessions) deliver(ctx context.Context, n store.Notification) {
	d.mu.Lock()
	handle, ok := d.held[n.Session]
	d.mu.Unlock()
	if !ok {
		return
	}
	d.inject(ctx, handle, n.Owner, []byte(n.Text))
}

// inject serves body to this replica's copy of the session handle, as a
// POST of principal's, and discards the response.
func (d *durableSessions) inject(ctx context.Context, handle, principal string, body []byte) {
	req, err := http.NewRequestWithContext(withCaller(context.WithoutCancel(ctx), Caller{Subject: principal}), http.MethodPost, "/mcp", bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", handle)
	req.Header.Set("Authorization", "Bearer internal") // for the SDK's check; the principal is the record's
	d.injector.ServeHTTP(discardResponse{}, req)
}

// serveHeld serves a request to the copy of its session this replica
// holds, if any.
func (d *durableSessions) serveHeld(w http.ResponseWriter, r *http.Request) {
	handle := r.Header.Get("Mcp-Session-Id")
	d.mu.Lock()
	_, native := d.native[handle]
	rs := d.restored[handle]
	if rs != nil && !rs.ended {
		rs.refs++
		rs.idle.Stop()
	} else {
		rs = nil
	}
	d.mu.Unlock()
	switch {
	case native:
		d.sdk.ServeHTTP(w, r)
	case rs != nil:
		defer d.release(rs)
		rs.transport.ServeHTTP(w, r)
	}
}

// discardResponse is the response to a delivered answer: no one reads it.
type discardResponse struct{}

func (discardResponse) Header() http.Header         { return http.Header{} }
func (discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (discardResponse) WriteHeader(int)             {}

// wait stops hearing answers and waits until every session held has
// closed.
func (d *durableSessions) wait() {
	if d.stop != nil {
		d.stop()
	}
	d.answers.Wait()
	d.watchers.Wait()
}

// subscribed records that the session ss subscribed to uri (add) or
// unsubscribed from it, for its copies on the other replicas.
func (d *durableSessions) subscribed(ctx context.Context, ss *mcp.ServerSession, uri string, add bool) error {
	return d.change(ctx, ss, func(st *sessionState) {
		switch i := slices.Index(st.Subscriptions, uri); {
		case add && i < 0:
			st.Subscriptions = append(st.Subscriptions, uri)
		case !add && i >= 0:
			st.Subscriptions = slices.Delete(st.Subscriptions, i, i+1)
		}
	})
}

// recordSubscription serves resources/subscribe or resources/unsubscribe
// and records the change in the session's record. A subscription that
// cannot be recorded (the record would grow beyond its bound) is undone
// and refused.
func (s *Server) recordSubscription(ctx context.Context, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	res, err := next(ctx, method, req)
	if err != nil {
		return res, err
	}
	var ss *mcp.ServerSession
	var uri string
	switch r := req.(type) {
	case *mcp.SubscribeRequest:
		if r.Params != nil {
			ss, uri = r.Session, r.Params.URI
		}
	case *mcp.UnsubscribeRequest:
		if r.Params != nil {
			ss, uri = r.Session, r.Params.URI
		}
	}
	if ss == nil || ss.ID() == "" {
		return res, nil
	}
	add := method == "resources/subscribe"
	if err := s.durable.subscribed(ctx, ss, uri, add); err != nil {
		s.log.ErrorContext(ctx, "mcpserver: recording a session's subscription failed", "err", err)
		if add {
			s.unsubscribe(ctx, ss, uri)
		}
		return nil, unrecorded(err, "the subscription could not be recorded", "The subscription could not be recorded: "+outageText)
	}
	return res, nil
}

// unrecorded is the error of a request whose change to its session's
// record failed with err: its message is outage when the database was out
// of reach (store.ErrUnavailable), else generic; its code is internal
// either way.
func unrecorded(err error, generic, outage string) error {
	msg := generic
	if errors.Is(err, store.ErrUnavailable) {
		msg = outage
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg}
}
