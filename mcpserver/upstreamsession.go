package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usherhq/usher/internal/seal"
	"github.com/usherhq/usher/store"
)

// A caller's session to an HTTP upstream that the replicas share. The SDK's
// client has no way to join a session another process opened, so the
// joining happens beneath it, in its HTTP transport (sharedSession): the
// client's initialize is answered with the recorded InitializeResult, its
// notifications/initialized is answered here, and each later request is
// sent with the recorded session id. The client only ever sees a stand-in
// id (sharedSessionStandIn), so the upstream's id, a capability, is in no
// log of the SDK's. When the upstream answers 404 (it has forgotten the
// session: it expired, or the upstream restarted) the request did not run:
// the transport joins the session another replica recorded since, or opens
// a new one and records it in place of the one that failed (a
// compare-and-swap, so that two replicas that see it fail at once end on
// one session), and sends the request again, once. Each client's requests
// go out under JSON-RPC ids of a range of its own (requestIDs), and its
// DELETE ends nothing upstream: the other replicas go on using the
// session.
//
// A replica that sends on a shared session moves its record's UsedAt
// forward, at most once every upstreamSessionTouchEvery (a write a minute,
// not one per call), and so, every minute, does a replica whose call is
// on it (touchSharedInUse: a call held open for its caller's answers may
// send nothing for longer than a sweep waits). Each replica's catalog
// sweeps the records every upstreamSessionSweepEvery
// (Catalog.sweepUpstreamSessions): a session
// that no replica has used for longer than any replica can still need it
// (upstreamSessionIdle: the pools' IdleTimeout and CallTimeout and two
// minutes), ended record or not, is claimed (its row deleted, by one
// sweep of all that run at once) and ended upstream with a DELETE,
// through the credentials transport of the caller it serves, which its
// record seals. A replica that still holds it then meets the 404, and
// opens or joins another as above. A row is deleted only by the sweep
// that ends its session, or replaced by the replica that ends it.

// UpstreamSessions keeps the records of the shared upstream sessions (a
// store.Store does).
type UpstreamSessions interface {
	PutUpstreamSession(ctx context.Context, s store.UpstreamSession, old string) (store.UpstreamSession, error)
	GetUpstreamSession(ctx context.Context, key string) (store.UpstreamSession, error)
	TouchUpstreamSession(ctx context.Context, key, session string, at time.Time) (bool, error)
	ResealUpstreamSession(ctx context.Context, key, old, session string, at time.Time) (bool, error)
	ClaimIdleUpstreamSessions(ctx context.Context, usedBefore time.Time, limit int) ([]store.UpstreamSession, error)
}

// upstreamSessionTouchEvery is how often, at most, a replica that uses a
// shared session moves its record's UsedAt forward.
const upstreamSessionTouchEvery = time.Minute

// upstreamSessionSweepEvery is the time between two sweeps of the shared
// sessions no replica uses any more.
const upstreamSessionSweepEvery = time.Minute

// upstreamSessionSweepBatch bounds the records one claim takes.
const upstreamSessionSweepBatch = 100

// upstreamSessionLifetime is how long a record of a shared upstream session
// is joined: then a replica that needs the session opens a new one, records
// it, and ends the old one, whose other holders then join the new one.
const upstreamSessionLifetime = DefaultSessionLifetime

// sharedSessionStandIn is the session id the SDK's client sees.
const sharedSessionStandIn = "usher-shared-session"

// maxInitializeAnswer bounds the upstream's answer to initialize that is
// read to be recorded.
const maxInitializeAnswer = store.MaxUpstreamSessionResult + 4096

// newUpstreamSessionSealer returns the sealer of the upstream session ids
// recorded in CatalogOptions.UpstreamSessions.
func newUpstreamSessionSealer(secret []byte, previous ...[]byte) (*seal.Sealer, error) {
	if len(secret) < minSecretBytes {
		return nil, fmt.Errorf("UpstreamSessions needs an UpstreamSessionSecret of at least %d bytes, got %d", minSecretBytes, len(secret))
	}
	return seal.NewRotated(secret, previous, "usher/mcp/v1", "usher/mcp/upstream-session", store.MaxUpstreamSessionID)
}

// sealedUpstreamSession is what a record's Session seals: the upstream's
// session id, and the key of the record, so that it opens under no other;
// and the upstream's name and the caller's subject, with whose
// credentials a sweep ends the session.
type sealedUpstreamSession struct {
	Key      string `json:"k"`
	ID       string `json:"i"`
	Upstream string `json:"u,omitempty"`
	Subject  string `json:"s,omitempty"`
}

// sharedKey is the record key of a pool key: what tells one upstream
// session of a caller from another (see connKey), and the upstream's URL.
func (u *upstream) sharedKey(key connKey) string {
	h := sha256.New()
	for _, part := range []string{"usher/upstream-session/v1", u.cfg.Name, u.cfg.URL, key.subject, strconv.FormatBool(key.rounds), key.offers} {
		fmt.Fprintf(h, "%d:%s\n", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sharedSession returns the transport that shares the session of key
// among the replicas, over next; nil when that session is not shared: the
// catalog's own (each replica's listens on its own standalone stream) and
// those to stdio upstreams.
func (u *upstream) sharedSession(key connKey, next http.RoundTripper) *sharedSession {
	if u.cat.opts.UpstreamSessions == nil || key.subject == "" || u.cfg.URL == "" {
		return nil
	}
	return &sharedSession{
		next: next, endpoint: u.cfg.URL, key: u.sharedKey(key), upstream: u.cfg.Name, subject: key.subject,
		store: u.cat.opts.UpstreamSessions, sealer: u.cat.sessionSealer, now: u.cat.opts.Now,
		log: u.cat.log.With("upstream", u.cfg.Name), ids: newRequestIDs(),
	}
}

// sharedSession is the HTTP transport of one client session to an upstream
// whose session the replicas share.
type sharedSession struct {
	next     http.RoundTripper
	endpoint string // the upstream's URL
	key      string
	upstream string // the upstream's name
	subject  string // the caller's
	store    UpstreamSessions
	sealer   *seal.Sealer
	now      func() time.Time
	log      *slog.Logger

	// ids keeps this client's request ids apart from the other
	// replicas' on the session.
	ids requestIDs

	// recovering serializes the recoveries from a 404 (see recover).
	recovering sync.Mutex

	mu sync.Mutex
	// id is the upstream's session id, "" before the handshake and for
	// an upstream that keeps no sessions.
	id string
	// sealed is the record's Session of id, "" when id is not
	// recorded; touched is when this replica last moved the record's
	// UsedAt (see touch).
	sealed  string
	touched time.Time
	// version is the protocol version the client and the session speak.
	version string
	// joined: the session was opened by another; the client's
	// notifications/initialized is answered here.
	joined bool
	// initialize is the client's initialize request (header and body),
	// with which a new session is opened when the upstream forgets this
	// one.
	initHeader http.Header
	initBody   []byte
}

// RoundTrip sends r on the shared session.
func (s *sharedSession) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		if s.current() != "" {
			// The client closes its session: the upstream's stays
			// open for the other replicas.
			closeRequestBody(r)
			return answerHere(r, http.StatusNoContent, "", nil), nil
		}
		return s.next.RoundTrip(r)
	default:
		// A GET resumes a call's stream (callers' sessions have no
		// standalone stream): on the session the call went out on,
		// which a 404 has not yet replaced.
		return s.send(r, nil, s.current())
	}
	body, err := readRequestBody(r)
	if err != nil {
		return nil, err
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	_ = json.Unmarshal(body, &msg) // a batch or a response has no method
	switch {
	case msg.Method == "initialize":
		return s.handshake(r, body, msg.ID)
	case msg.Method == "notifications/initialized" && s.isJoined():
		return answerHere(r, http.StatusAccepted, "", nil), nil
	}
	s.touch(r.Context())
	id := s.current()
	resp, err := s.send(r, body, id)
	if err != nil || resp.StatusCode != http.StatusNotFound || id == "" {
		return resp, err
	}
	// The upstream has forgotten the session: the request did not run.
	drainResponse(resp)
	next, err := s.recover(r, id)
	if err != nil {
		return nil, fmt.Errorf("%w: the upstream's session ended and no other could be opened: %w", errUpstreamNotSent, err)
	}
	resp, err = s.send(r, body, next)
	if err == nil && resp.StatusCode == http.StatusNotFound {
		// Forgotten again at once: still not run, and the next request
		// tries again.
		drainResponse(resp)
		return nil, fmt.Errorf("%w: the upstream forgot its new session at once", errUpstreamNotSent)
	}
	return resp, err
}

// errUpstreamNotSent marks a request to an upstream that certainly did not
// run (see notSent).
var errUpstreamNotSent = errors.New("not sent to the upstream")

func (s *sharedSession) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// touch moves the UsedAt of the record of the session in use forward, to
// now, unless this replica did so less than upstreamSessionTouchEvery
// ago: the sweeps leave a session in use open. A record's seal opens for
// twice upstreamSessionLifetime: when it opens for less than one lifetime
// more, the touch seals the session anew in the same write, so that a
// session in use for days can still be opened, and ended, by the sweep
// that finds it idle. A replica whose seal the record no longer holds
// takes the record's (see adopt). A failure is logged; the next request
// tries again.
func (s *sharedSession) touch(ctx context.Context) {
	now := s.now()
	s.mu.Lock()
	sealed, id := s.sealed, s.id
	due := sealed != "" && now.Sub(s.touched) >= upstreamSessionTouchEvery
	if due {
		s.touched = now
	}
	s.mu.Unlock()
	if !due {
		return
	}
	ctx = withoutInflight(ctx)
	var held bool
	var err error
	if fresh := s.resealed(sealed, id, now); fresh != "" {
		if held, err = s.store.ResealUpstreamSession(ctx, s.key, sealed, fresh, now); held {
			s.replaceSeal(sealed, fresh)
		}
	} else {
		held, err = s.store.TouchUpstreamSession(ctx, s.key, sealed, now)
	}
	if err == nil && !held {
		err = s.adopt(ctx, sealed, id, now)
	}
	if err != nil {
		s.mu.Lock()
		s.touched = time.Time{}
		s.mu.Unlock()
		s.log.Warn("mcpserver: the use of a shared upstream session could not be recorded", "err", err)
	}
}

// seal seals the upstream's session id for this session's record, to
// open until twice upstreamSessionLifetime after now.
func (s *sharedSession) seal(id string, now time.Time) (string, error) {
	return s.sealer.Seal(sealedUpstreamSession{Key: s.key, ID: id, Upstream: s.upstream, Subject: s.subject},
		now.Add(2*upstreamSessionLifetime))
}

// resealed returns a new seal of the session id when sealed, its seal,
// opens for less than upstreamSessionLifetime more; "" when it opens for
// longer, or cannot be sealed anew (the touch then touches).
func (s *sharedSession) resealed(sealed, id string, now time.Time) string {
	var v sealedUpstreamSession
	if s.sealer.Open(sealed, now.Add(upstreamSessionLifetime), &v) == nil {
		return ""
	}
	fresh, err := s.seal(id, now)
	if err != nil {
		return ""
	}
	return fresh
}

// adopt reads the record of a session whose seal sealed the record no
// longer holds: when it holds the same upstream session id under a new
// seal (another replica sealed it anew), this replica uses that seal from
// now on, and moves the record's UsedAt forward. A record of another
// session, or none, is left as it is: the upstream answers 404 to a
// session that has been replaced and ended, and the request recovers.
func (s *sharedSession) adopt(ctx context.Context, sealed, id string, now time.Time) error {
	rec, err := s.store.GetUpstreamSession(ctx, s.key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	if got, ok := s.open(rec); !ok || got != id || rec.Session == sealed {
		return nil
	}
	s.replaceSeal(sealed, rec.Session)
	_, err = s.store.TouchUpstreamSession(ctx, s.key, rec.Session, now)
	return err
}

// replaceSeal uses fresh as the record's seal of the session in place of
// old, unless the session in use has changed meanwhile.
func (s *sharedSession) replaceSeal(old, fresh string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed == old {
		s.sealed = fresh
	}
}

func (s *sharedSession) isJoined() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joined
}

// send sends r (with body, for a POST) on the upstream's session id, and
// shows the client the stand-in id in its place.
func (s *sharedSession) send(r *http.Request, body []byte, id string) (*http.Response, error) {
	r = r.Clone(r.Context())
	if id != "" && body != nil {
		body = s.ids.out(body)
	}
	if body != nil {
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	if id != "" {
		r.Header.Set("Mcp-Session-Id", id)
	}
	resp, err := s.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.Header.Get("Mcp-Session-Id") != "" {
		resp.Header.Set("Mcp-Session-Id", sharedSessionStandIn)
	}
	if id != "" {
		s.ids.answers(resp)
	}
	return resp, nil
}

// handshake answers the client's initialize: with the recorded session of
// the key when there is one, else with a new session of the upstream,
// recorded.
func (s *sharedSession) handshake(r *http.Request, body, reqID json.RawMessage) (*http.Response, error) {
	s.mu.Lock()
	s.initHeader, s.initBody = r.Header.Clone(), body
	s.mu.Unlock()
	ctx := withoutInflight(r.Context())
	rec, err := s.store.GetUpstreamSession(ctx, s.key)
	old := ""
	switch {
	case err == nil:
		old = rec.Session
		if id, ok := s.open(rec); ok && rec.Active(s.now()) {
			s.join(rec, id)
			return s.initialized(r, reqID, rec.InitializeResult), nil
		}
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("%w: the record of the upstream's session: %w", errUpstreamNotSent, err)
	}
	opened, resp, err := s.initialize(r.WithContext(ctx), r.Header, body)
	if err != nil || opened == nil {
		// The upstream refused, or keeps no sessions: the client sees
		// its answer as it is.
		return resp, err
	}
	if opened.result == nil {
		// The client makes of the answer what it can, on a session of
		// this replica alone.
		s.use(opened, false)
		return resp, nil
	}
	joined, err := s.record(ctx, opened, old, "")
	if err != nil {
		// The session works, unshared: the next replica to need it
		// opens its own.
		s.log.Warn("mcpserver: an upstream session could not be recorded for the other replicas", "err", err)
	}
	if joined != nil {
		return s.initialized(r, reqID, joined.result), nil
	}
	return resp, nil
}

// openedSession is an upstream session this replica opened, or joined.
type openedSession struct {
	id, version string
	result      json.RawMessage
	// sealed is its record's Session once recorded.
	sealed string
}

// initialize sends an initialize request (header, body) to the upstream
// without a session, and returns the session it opens, with the answer to
// give the client. The session is nil when the upstream refused (its
// answer is returned) or gave no session id, and has no result when its
// answer is not one to record.
func (s *sharedSession) initialize(r *http.Request, header http.Header, body []byte) (*openedSession, *http.Response, error) {
	r = r.Clone(r.Context())
	r.Header = header.Clone()
	r.Header.Del("Mcp-Session-Id")
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	resp, err := s.next.RoundTrip(r)
	if err != nil {
		return nil, nil, err
	}
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		return nil, resp, nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxInitializeAnswer+1))
	resp.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	resp.ContentLength = int64(len(raw))
	resp.Header.Set("Mcp-Session-Id", sharedSessionStandIn)
	result, ok := initializeResultOf(resp.Header.Get("Content-Type"), raw)
	var ir struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if !ok || len(raw) > maxInitializeAnswer || json.Unmarshal(result, &ir) != nil || ir.ProtocolVersion == "" {
		// Not an answer to record (an error, or too large).
		return &openedSession{id: id}, resp, nil
	}
	return &openedSession{id: id, version: ir.ProtocolVersion, result: result}, resp, nil
}

// record records the session this replica opened in place of the record
// that held old ("" for none), and uses it; the session old held is ended
// unless it is gone (the id gone). When another replica recorded a
// session of the key first, the one recorded is joined (and returned) and
// the one opened here ended.
func (s *sharedSession) record(ctx context.Context, opened *openedSession, old, gone string) (*openedSession, error) {
	now := s.now()
	sealed, err := s.seal(opened.id, now)
	if err == nil {
		_, err = s.store.PutUpstreamSession(ctx, store.UpstreamSession{Key: s.key, Session: sealed, ProtocolVersion: opened.version,
			InitializeResult: opened.result, CreatedAt: now, ExpiresAt: now.Add(upstreamSessionLifetime)}, old)
	}
	if errors.Is(err, store.ErrConflict) {
		if rec, gerr := s.store.GetUpstreamSession(ctx, s.key); gerr == nil {
			if id, ok := s.open(rec); ok && rec.ProtocolVersion == opened.version {
				s.end(ctx, opened.id, opened.version)
				s.join(rec, id)
				return &openedSession{id: id, version: rec.ProtocolVersion, result: rec.InitializeResult, sealed: rec.Session}, nil
			}
		}
	}
	if err != nil {
		s.use(opened, false)
		return nil, err
	}
	opened.sealed = sealed
	s.use(opened, false)
	if old != "" {
		// The record this one replaces had ended, or holds a session
		// this replica could not join: so does its session, and the
		// replicas still on it join this one.
		var prev sealedUpstreamSession
		if s.sealer.Open(old, now, &prev) == nil && prev.Key == s.key && prev.ID != opened.id && prev.ID != gone {
			s.end(ctx, prev.ID, opened.version)
		}
	}
	return nil, nil
}

// open returns the upstream session id a record seals, or false.
func (s *sharedSession) open(rec store.UpstreamSession) (string, bool) {
	var v sealedUpstreamSession
	if err := s.sealer.Open(rec.Session, s.now(), &v); err != nil || v.Key != s.key || v.ID == "" {
		return "", false
	}
	return v.ID, true
}

// join uses the recorded session rec, whose id is id.
func (s *sharedSession) join(rec store.UpstreamSession, id string) {
	s.use(&openedSession{id: id, version: rec.ProtocolVersion, sealed: rec.Session}, true)
}

// use sends the client's requests on the session o from now on. A session
// recorded here was used as recorded; a joined one is touched on its
// first request.
func (s *sharedSession) use(o *openedSession, joined bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.version, s.joined, s.sealed = o.id, o.version, joined, o.sealed
	s.touched = time.Time{}
	if !joined && o.sealed != "" {
		s.touched = s.now()
	}
}

// initialized is the answer to the client's initialize (id reqID) from a
// session that is already open: its InitializeResult.
func (s *sharedSession) initialized(r *http.Request, reqID, result json.RawMessage) *http.Response {
	if len(reqID) == 0 {
		reqID = json.RawMessage("null")
	}
	body := `{"jsonrpc":"2.0","id":` + string(reqID) + `,"result":` + string(result) + `}`
	return answerHere(r, http.StatusOK, body, http.Header{"Content-Type": {"application/json"}, "Mcp-Session-Id": {sharedSessionStandIn}})
}

// recover replaces the session failed, which the upstream has forgotten:
// with the session another replica recorded since, or else with a new
// one, recorded in place of failed. It returns the id to send on.
func (s *sharedSession) recover(r *http.Request, failed string) (string, error) {
	s.recovering.Lock()
	defer s.recovering.Unlock()
	s.mu.Lock()
	id, version, header, body := s.id, s.version, s.initHeader, s.initBody
	s.mu.Unlock()
	if id != failed {
		return id, nil // another request recovered first
	}
	if body == nil {
		return "", errors.New("no handshake to open a session with")
	}
	ctx := withoutInflight(r.Context())
	rec, err := s.store.GetUpstreamSession(ctx, s.key)
	sealed := ""
	switch {
	case err == nil:
		if other, ok := s.open(rec); ok && other != failed && rec.Active(s.now()) && rec.ProtocolVersion == version {
			s.join(rec, other)
			return other, nil
		}
		// The record holds the session that failed, or one this
		// replica cannot join: the new one replaces what is there.
		sealed = rec.Session
	case errors.Is(err, store.ErrNotFound):
	default:
		return "", err
	}
	opened, resp, err := s.initialize(r.WithContext(ctx), header, body)
	if err != nil {
		return "", err
	}
	drainResponse(resp)
	if opened == nil {
		return "", fmt.Errorf("the upstream answered initialize with status %d", resp.StatusCode)
	}
	if opened.result == nil {
		s.end(ctx, opened.id, "")
		return "", errors.New("the upstream's answer to initialize is not one to record")
	}
	if opened.version != version {
		s.end(ctx, opened.id, opened.version)
		return "", fmt.Errorf("the upstream's new session speaks protocol %s, not %s", opened.version, version)
	}
	if err := s.notifyInitialized(ctx, r, header, opened); err != nil {
		return "", err
	}
	joined, err := s.record(ctx, opened, sealed, failed)
	if err != nil {
		s.log.Warn("mcpserver: an upstream session could not be recorded for the other replicas", "err", err)
	}
	if joined != nil {
		return joined.id, nil
	}
	return opened.id, nil
}

// notifyInitialized ends the handshake of a session opened in recover.
func (s *sharedSession) notifyInitialized(ctx context.Context, r *http.Request, header http.Header, o *openedSession) error {
	body := []byte(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = header.Clone()
	req.Header.Set("Mcp-Session-Id", o.id)
	req.Header.Set("Mcp-Protocol-Version", o.version)
	resp, err := s.next.RoundTrip(req)
	if err != nil {
		return err
	}
	drainResponse(resp)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the upstream answered notifications/initialized with status %d", resp.StatusCode)
	}
	return nil
}

// end ends an upstream session (best effort): one opened here that is not
// used, or one whose record has ended.
func (s *sharedSession) end(ctx context.Context, id, version string) {
	_ = endUpstreamSession(ctx, s.next, s.endpoint, id, version)
}

// endUpstreamSession ends the upstream session id (of protocol version,
// when known) at endpoint with a DELETE sent through next. The upstream
// having forgotten the session (404) is no error.
func endUpstreamSession(ctx context.Context, next http.RoundTripper, endpoint, id, version string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, endpoint, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Mcp-Session-Id", id)
	if version != "" {
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%w: %w", errEndAgain, err)
	}
	drainResponse(resp)
	switch code := resp.StatusCode; {
	case code/100 == 2 || code == http.StatusNotFound:
		return nil
	case code >= 500 || code == http.StatusTooManyRequests:
		return fmt.Errorf("%w: the upstream answered DELETE with status %d", errEndAgain, code)
	default:
		return fmt.Errorf("the upstream answered DELETE with status %d", code)
	}
}

// upstreamSessionIdle is how long after its last use a shared session is
// ended: no replica can still need it by then. A replica moves UsedAt
// forward at most upstreamSessionTouchEvery before it sends on the
// session; its call runs for at most CallTimeout; its pool then closes
// the session after IdleTimeout unused; and a minute more, for the
// replicas' clocks.
func (c *Catalog) upstreamSessionIdle() time.Duration {
	return c.opts.IdleTimeout + c.opts.CallTimeout + upstreamSessionTouchEvery + time.Minute
}

// sweepUpstreamSessions ends upstream the shared sessions no replica has
// used for upstreamSessionIdle, ended records or not, and deletes their
// records: each record is claimed (deleted) first, so that of the
// replicas sweeping at once one ends it. A session whose record does not
// say whose it is (written by an earlier version), or whose upstream is
// no longer configured, is only forgotten. It returns how many sessions
// were ended upstream.
func (c *Catalog) sweepUpstreamSessions(ctx context.Context) (int, error) {
	st := c.opts.UpstreamSessions
	if st == nil {
		return 0, nil
	}
	now := c.opts.Now()
	ended := 0
	for {
		claimed, err := st.ClaimIdleUpstreamSessions(ctx, now.Add(-c.upstreamSessionIdle()), upstreamSessionSweepBatch)
		if err != nil {
			return ended, err
		}
		for _, rec := range claimed {
			switch err := c.endSharedSession(ctx, now, rec); {
			case err == nil:
				ended++
			case errors.Is(err, errEndAgain):
				c.putBackSharedSession(ctx, rec)
			}
		}
		if len(claimed) < upstreamSessionSweepBatch {
			return ended, nil
		}
	}
}

// errEndAgain says that a session could not be ended upstream for now
// (the upstream unreachable, or answering with a server error): its record
// is put back, for a later sweep.
var errEndAgain = errors.New("the upstream could not end the session now")

// endSharedSession ends upstream the session of a claimed record. Its
// error wraps errEndAgain when a later sweep may succeed.
func (c *Catalog) endSharedSession(ctx context.Context, now time.Time, rec store.UpstreamSession) error {
	var v sealedUpstreamSession
	if err := c.sessionSealer.Open(rec.Session, now, &v); err != nil || v.Key != rec.Key || v.ID == "" {
		c.log.Warn("mcpserver: an idle shared upstream session could not be ended: its record does not open", "err", err)
		return errors.New("the record does not open")
	}
	if v.Upstream == "" || v.Subject == "" {
		c.log.Warn("mcpserver: an idle shared upstream session could not be ended: its record does not say whose it is")
		return errors.New("the record does not say whose it is")
	}
	for _, u := range c.upstreams {
		if u.cfg.Name != v.Upstream || u.cfg.URL == "" {
			continue
		}
		err := endUpstreamSession(ctx, u.credentials(v.Subject), u.cfg.URL, v.ID, rec.ProtocolVersion)
		if err != nil {
			c.log.Warn("mcpserver: an idle shared upstream session could not be ended", "upstream", u.cfg.Name, "err", err)
		}
		return err
	}
	c.log.Warn("mcpserver: an idle shared upstream session could not be ended: its upstream is not configured", "upstream", v.Upstream)
	return errors.New("its upstream is not configured")
}

// putBackSharedSession records again a claimed session that could not be
// ended for now, as it was and still idle (UsedAt is its CreatedAt), so
// that the next sweep tries again; until the record's seal no longer
// opens (twice upstreamSessionLifetime after it was last sealed), when it is
// forgotten. A replica may
// join it meanwhile: the session is still open upstream. If another
// session of the same key was recorded meanwhile, the record cannot be
// put back, and the session is left to the upstream's own timeout.
func (c *Catalog) putBackSharedSession(ctx context.Context, rec store.UpstreamSession) {
	if _, err := c.opts.UpstreamSessions.PutUpstreamSession(ctx, rec, ""); err != nil {
		c.log.Warn("mcpserver: a shared upstream session that could not be ended could not be recorded again", "err", err)
	}
}

// touchSharedInUse moves forward the UsedAt of the shared sessions that
// calls of this replica are using now: a call may be quiet for longer
// than the sweeps' idle time (one held open for its caller's answers
// sends nothing while it waits), and its session must not be ended under
// it.
func (c *Catalog) touchSharedInUse(ctx context.Context) {
	var inUse []*sharedSession
	c.pool.mu.Lock()
	for _, conn := range c.pool.conns {
		if s := conn.shared.Load(); s != nil && conn.refs > 0 {
			inUse = append(inUse, s)
		}
	}
	c.pool.mu.Unlock()
	for _, s := range inUse {
		s.touch(ctx)
	}
}

// sweepUpstreamSessionsEvery runs touchSharedInUse and
// sweepUpstreamSessions every upstreamSessionSweepEvery until the catalog
// closes; the first time one interval after the catalog starts.
func (c *Catalog) sweepUpstreamSessionsEvery() {
	defer c.work.Done()
	tick := time.NewTicker(upstreamSessionSweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-c.stop.Done():
			return
		case <-tick.C:
		}
		c.touchSharedInUse(c.stop)
		if n, err := c.sweepUpstreamSessions(c.stop); err != nil && c.stop.Err() == nil {
			c.log.Warn("mcpserver: sweeping the idle shared upstream sessions", "err", err)
		} else if n > 0 {
			c.log.Debug("mcpserver: ended idle shared upstream sessions", "sessions", n)
		}
	}
}

// initializeResultOf returns the result of the JSON-RPC response in an
// answer to initialize: a JSON body, or the data of an event of a stream.
func initializeResultOf(contentType string, raw []byte) (json.RawMessage, bool) {
	var bodies [][]byte
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "application/json":
		bodies = [][]byte{raw}
	case "text/event-stream":
		var data []byte
		for line := range strings.Lines(strings.ReplaceAll(string(raw), "\r\n", "\n")) {
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if data != nil {
					bodies = append(bodies, data)
				}
				data = nil
			case strings.HasPrefix(line, "data:"):
				v := strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, v...)
			}
		}
		if data != nil {
			bodies = append(bodies, data)
		}
	}
	for _, b := range bodies {
		var msg struct {
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(b, &msg) == nil && len(msg.Result) > 0 && msg.Result[0] == '{' {
			return msg.Result, true
		}
	}
	return nil, false
}

// withoutInflight is ctx without the call it may carry: the requests of a
// handshake are not the call's, whose stream they must not end (see
// sseTap).
func withoutInflight(ctx context.Context) context.Context {
	return context.WithValue(ctx, inflightKey{}, nil)
}

// readRequestBody reads r's body, which the SDK's client sends from memory.
func readRequestBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	defer r.Body.Close()
	return io.ReadAll(r.Body)
}

// closeRequestBody closes the body of a request answered here.
func closeRequestBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

// drainResponse reads what is left of a response's body (a little) and closes it,
// so that its connection is used again.
func drainResponse(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// answerHere is an answer made here, to r.
func answerHere(r *http.Request, status int, body string, header http.Header) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r,
	}
}

// requestIDs keeps the JSON-RPC ids of one client's requests on a shared
// session apart from every other's. Each replica's client numbers its
// requests from 1, and an upstream refuses a request whose id is in
// flight on the session, and would take a notifications/cancelled of one
// replica's request for the other's: so a request's id n goes out as
// base+n, and the answer's comes back as n. The base is random, a multiple
// of 2^32 below 2^52 (an id stays exact in a JSON number, for an upstream
// in JavaScript): two clients' ranges meet with odds of one in 2^20.
type requestIDs struct{ base int64 }

// idRange is how many request ids of one client are kept apart.
const idRange = 1 << 32

func newRequestIDs() requestIDs {
	n, _ := rand.Int(rand.Reader, big.NewInt(1<<20-1)) // crypto/rand never fails
	return requestIDs{base: (n.Int64() + 1) * idRange}
}

// out returns the message body with its request id (and the id a
// notifications/cancelled names) moved into the client's range.
func (ids requestIDs) out(body []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m["method"] == nil {
		return body // a batch, or an answer to the upstream's request
	}
	changed := false
	if id, ok := ids.shift(m["id"], ids.base); ok {
		m["id"], changed = id, true
	}
	var method string
	_ = json.Unmarshal(m["method"], &method)
	if method == "notifications/cancelled" {
		var p map[string]json.RawMessage
		if json.Unmarshal(m["params"], &p) == nil {
			if id, ok := ids.shift(p["requestId"], ids.base); ok {
				p["requestId"] = id
				if params, err := json.Marshal(p); err == nil {
					m["params"], changed = params, true
				}
			}
		}
	}
	if !changed {
		return body
	}
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

// in returns a message from the upstream with the id of an answer to one
// of the client's requests moved back.
func (ids requestIDs) in(msg []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil || m["method"] != nil {
		return msg // a batch, or the upstream's own request or notification
	}
	id, ok := ids.shift(m["id"], -ids.base)
	if !ok {
		return msg
	}
	m["id"] = id
	out, err := json.Marshal(m)
	if err != nil {
		return msg
	}
	return out
}

// shift returns the integer id raw moved by by, if it is in the range it
// moves from: [0, idRange) out, the client's range back.
func (ids requestIDs) shift(raw json.RawMessage, by int64) (json.RawMessage, bool) {
	var n int64
	if raw == nil || json.Unmarshal(raw, &n) != nil || bytes.ContainsAny(raw, ".eE") {
		return nil, false
	}
	from := int64(0)
	if by < 0 {
		from = ids.base
	}
	if n < from || n >= from+idRange {
		return nil, false
	}
	return json.RawMessage(strconv.FormatInt(n+by, 10)), true
}

// answers makes the upstream's answers in resp's body carry the client's
// own request ids (see requestIDs.in): a JSON body whole, a stream event
// by event as it is read.
func (ids requestIDs) answers(resp *http.Response) {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		resp.Body = &jsonAnswer{body: resp.Body, ids: ids}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	case "text/event-stream":
		resp.Body = &sseAnswers{r: bufio.NewReader(resp.Body), body: resp.Body, ids: ids}
	}
}

// jsonAnswer is a JSON body with its answer's id moved back, once read.
type jsonAnswer struct {
	body io.ReadCloser
	ids  requestIDs
	rest *bytes.Reader
}

func (j *jsonAnswer) Read(p []byte) (int, error) {
	if j.rest == nil {
		raw, err := io.ReadAll(j.body)
		if err != nil {
			return 0, err
		}
		j.rest = bytes.NewReader(j.ids.in(raw))
	}
	return j.rest.Read(p)
}

func (j *jsonAnswer) Close() error { return j.body.Close() }

// sseAnswers is a stream whose events' data have their answers' ids moved
// back; every other line passes as it is.
type sseAnswers struct {
	r    *bufio.Reader
	body io.Closer
	ids  requestIDs
	out  bytes.Buffer
	data []byte // the data of the current event
	err  error
}

func (s *sseAnswers) Read(p []byte) (int, error) {
	for s.out.Len() == 0 && s.err == nil {
		line, err := s.r.ReadBytes('\n')
		if len(line) > 0 {
			s.line(line)
		}
		if err != nil {
			s.flush()
			s.err = err
		}
	}
	if s.out.Len() > 0 {
		return s.out.Read(p)
	}
	return 0, s.err
}

func (s *sseAnswers) line(line []byte) {
	text := bytes.TrimRight(line, "\r\n")
	switch {
	case len(text) == 0:
		s.flush()
		s.out.Write(line)
	case bytes.HasPrefix(text, []byte("data:")):
		if s.data != nil {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, bytes.TrimPrefix(bytes.TrimPrefix(text, []byte("data:")), []byte(" "))...)
		if s.data == nil {
			s.data = []byte{}
		}
	default:
		s.out.Write(line)
	}
}

// flush writes the current event's data, its answer's id moved back.
func (s *sseAnswers) flush() {
	if s.data == nil {
		return
	}
	if len(s.data) == 0 {
		s.out.WriteString("data:\n") // an event of no data (a stream's first, to be resumed from)
	}
	for l := range bytes.Lines(s.ids.in(s.data)) {
		s.out.WriteString("data: ")
		s.out.Write(bytes.TrimRight(l, "\n"))
		s.out.WriteByte('\n')
	}
	s.data = nil
}

func (s *sseAnswers) Close() error { return s.body.Close() }
