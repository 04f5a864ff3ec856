//lint:file-ignore SA1019 Sampling is deprecated as of protocol 2026-07-28 (SEP-2577) but upstreams of the older protocols still ask for it: Usher passes it on while they do.

package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An upstream of a protocol before 2026-07-28 asks for input with a
// request of its own (elicitation/create, sampling/createMessage) during a
// tool call, and waits for the answer while the call stays open. A caller
// of 2026-07-28 asks and answers in rounds instead (multi round-trip
// requests): so Usher holds the upstream's call open, answers the
// caller's round with the upstream's request as an input request, and
// names the held call in the round's upstream state, which Usher's own
// requestState seals (see askForInput). The caller's retry brings the
// answer, which goes to the upstream's waiting request, and gets what the
// upstream does next: its result, or its next request as the next round.
// A held call whose request gets no answer within the round's input
// lifetime is cancelled upstream and recorded (KindInputAbandoned).

// heldSettle is how long a round waits, once an upstream has asked, for
// more requests the upstream sends at the same time (the Go SDK's server
// sends each input request of a handler's incomplete result as a request
// of its own, all at once), so that they go in one round: the round goes
// when no request has come for heldSettle, or heldSettleMax after the
// first.
const (
	heldSettle    = 25 * time.Millisecond
	heldSettleMax = 8 * heldSettle
)

// heldPrefix begins the upstream state of a round that names a held call.
const heldPrefix = "usher-held:"

// heldCall is an upstream call held open while its caller answers the
// upstream's request for input.
type heldCall struct {
	id       string // in the round's state, after heldPrefix
	subject  string // whose call it is
	upstream string
	f        *inflight // the call, as its upstream session tracks it
	lifetime time.Duration
	ctx      context.Context    // the upstream call's
	cancel   context.CancelFunc // ends the upstream call

	mu   sync.Mutex
	caps *mcp.ClientCapabilities // what the latest round's caller declared
	seq  int                     // numbers the upstream's requests
	asks map[string]*heldAsk     // the requests awaiting an answer, by id; none while the upstream works
	// handed: asks went to the caller in a round, and no answer has come
	// since: the upstream awaits the caller and sends nothing meanwhile.
	handed  bool
	end     *heldEnd      // how the call ended, once it has
	changed chan struct{} // closed, and replaced, when ask or end changes
}

// heldAsk is an upstream's request awaiting the caller's answer.
type heldAsk struct {
	req    mcp.InputRequest
	answer chan mcp.InputResponse // buffered: the one answer
	expiry *time.Timer            // cancels the call when no answer comes in time
}

// heldEnd is how an upstream call ended: its result (of the request's
// own type), or its failure.
type heldEnd struct {
	res mcp.Result
	err error
}

// heldCalls are the calls this process holds, by id and by the id of
// their inflight call (which the upstream's requests find them by).
type heldCalls struct {
	mu         sync.Mutex
	byID       map[string]*heldCall
	byInflight map[string]*heldCall
}

func (h *heldCalls) add(c *heldCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byID == nil {
		h.byID, h.byInflight = map[string]*heldCall{}, map[string]*heldCall{}
	}
	h.byID[c.id], h.byInflight[c.f.id] = c, c
}

func (h *heldCalls) remove(c *heldCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byID, c.id)
	delete(h.byInflight, c.f.id)
}

// get returns the held call named by a round's upstream state.
func (h *heldCalls) get(state string) (*heldCall, bool) {
	id, ok := heldID(state)
	if !ok {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.byID[id]
	return c, ok
}

// cancel ends the held call a round's upstream state names, if this
// process holds it: its request was not passed on to the caller.
func (h *heldCalls) cancel(state string) {
	if c, ok := h.get(state); ok {
		c.cancel()
	}
}

// resumesHeld reports whether the round is a later round of a held call.
func (r *round) resumesHeld() bool {
	_, ok := heldID(r.state)
	return ok
}

// heldID returns the id of the held call a round's upstream state names.
func heldID(state string) (string, bool) {
	if len(state) <= len(heldPrefix) || state[:len(heldPrefix)] != heldPrefix {
		return "", false
	}
	return state[len(heldPrefix):], true
}

// startHeld starts a request on conn, held, as send sends it: it returns
// at once, and the request's rounds follow with next. The request owns
// conn's use and f's tracking from now on, and gives them up when it
// ends; send turns how the request ended into its result (see
// upstream.outcome). Closing the catalog cancels it.
func (u *upstream) startHeld(ctx context.Context, conn *conn, f *inflight, r *round,
	send func(context.Context) (mcp.Result, error)) *heldCall {
	c, _ := CallerFromContext(ctx)
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(u.cat.stop, cancel)
	h := &heldCall{id: rand.Text(), subject: c.Subject, upstream: u.cfg.Name, f: f, lifetime: r.lifetime, ctx: callCtx, cancel: cancel,
		changed: make(chan struct{}), caps: r.caps}
	u.cat.held.add(h)
	u.cat.work.Add(1)
	go func() {
		defer u.cat.work.Done()
		defer stop()
		defer cancel()
		defer u.cat.pool.release(conn)
		defer conn.untrack(f)
		defer u.cat.held.remove(h)
		res, err := send(callCtx)
		h.finish(&heldEnd{res: res, err: err})
	}()
	return h
}

// heldCancelled is the failure of a held request whose send failed after
// it was cancelled here (see expire and next): the session is sound, and
// stays open for the cancellation to reach the upstream.
func heldCancelled(ctx context.Context, upstream string, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w: upstream %s: the held call was cancelled", errOutcomeUnknown, upstream)
	}
	return nil
}

// finish records how the upstream call ended, for the round waiting for
// it.
func (h *heldCall) finish(e *heldEnd) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.end = e
	for id, a := range h.asks {
		a.expiry.Stop()
		delete(h.asks, id)
	}
	h.broadcastLocked()
}

func (h *heldCall) broadcastLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// request is the upstream's request for input, made while the call is
// held: it becomes an input request of the next round (an upstream may
// have several waiting at once), and waits for the caller's answer, at
// most the lifetime, after which the call is cancelled. A request the
// caller did not declare it answers (its session offers the upstream
// only what the caller declared, so one whose latest round declared
// less) is refused to the upstream at once, audited, as the
// specification forbids passing it on; the upstream may go on without.
func (h *heldCall) request(req mcp.InputRequest) (mcp.InputResponse, error) {
	h.mu.Lock()
	if h.end != nil {
		h.mu.Unlock()
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the call has ended"}
	}
	if _, method, declared := inputKind(req, h.caps); !declared {
		h.mu.Unlock()
		if h.f.record != nil {
			h.f.record(context.WithoutCancel(h.f.ctx), h.event("", method+": the caller does not offer it"), KindRequestRefused)
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the caller does not offer this"}
	}
	h.seq++
	a := &heldAsk{req: req, answer: make(chan mcp.InputResponse, 1), expiry: time.AfterFunc(h.lifetime, h.expire)}
	if h.asks == nil {
		h.asks = map[string]*heldAsk{}
	}
	h.asks["input-"+strconv.Itoa(h.seq)] = a
	h.broadcastLocked()
	h.mu.Unlock()
	select {
	case v := <-a.answer:
		return v, nil
	case <-h.ctx.Done():
		return nil, h.ctx.Err()
	}
}

// expire cancels the call whose request got no answer in time.
func (h *heldCall) expire() {
	h.mu.Lock()
	if len(h.asks) == 0 || h.end != nil {
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	if h.f.record != nil {
		h.f.record(context.WithoutCancel(h.f.ctx), h.event(OutcomeFailed,
			"input request: no answer came within "+h.lifetime.String()+"; the upstream call was cancelled"), KindInputAbandoned)
	}
	h.cancel()
}

// event is an audit record of the held call.
func (h *heldCall) event(outcome, reason string) Event {
	ev := h.f.event()
	ev.Outcome, ev.Reasons = outcome, []string{reason}
	return ev
}

// answer delivers the caller's answers to the upstream's waiting
// requests that r's responses answer; the others are asked again.
func (h *heldCall) answer(r *round) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.caps = r.caps
	for id, a := range h.asks {
		if v, ok := r.responses[id]; ok && v != nil {
			a.expiry.Stop()
			a.answer <- v
			delete(h.asks, id)
			h.handed = false
		}
	}
}

// next waits for what the upstream does next and returns it as the
// round's result: the call's result, or an incomplete result whose input
// requests are the upstream's waiting ones and whose state names this
// call. A round
// that gives up waiting (its caller went, or its time ran out) cancels
// the call: nobody is left to take its result.
func (h *heldCall) next(ctx context.Context) (*mcp.CallToolResult, *heldEnd) {
	settled := false
	var settleBy time.Time
	for {
		h.mu.Lock()
		if h.end != nil {
			e := h.end
			h.mu.Unlock()
			return nil, e
		}
		if len(h.asks) > 0 && !settled {
			// Requests an upstream sends together go in one round.
			if settleBy.IsZero() {
				settleBy = time.Now().Add(heldSettleMax)
			}
			ch := h.changed
			h.mu.Unlock()
			quiet := time.NewTimer(min(heldSettle, time.Until(settleBy)))
			select {
			case <-ch: // another request, or the end: wait on
			case <-quiet.C:
				settled = true
			case <-ctx.Done():
				settled = true
			}
			quiet.Stop()
			continue
		}
		if len(h.asks) > 0 {
			res := &mcp.CallToolResult{Content: []mcp.Content{}, InputRequests: mcp.InputRequestMap{}, RequestState: heldPrefix + h.id}
			for id, a := range h.asks {
				res.InputRequests[id] = a.req
			}
			h.handed = true
			h.mu.Unlock()
			return res, nil
		}
		ch := h.changed
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			h.cancel()
			return nil, &heldEnd{err: fmt.Errorf("%w: waiting for the held call: %v", errOutcomeUnknown, ctx.Err())}
		}
	}
}

// heldRequest turns an upstream's request during a held call into the
// next round: the handler of a session of a caller of 2026-07-28 to an
// upstream of an older protocol.
func heldRequest[P mcp.InputRequest, R any](c *conn, held *heldCalls, params P) (*R, error) {
	h, err := c.heldTarget(held)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	v, err := h.request(params)
	if err != nil {
		return nil, err
	}
	// The caller's answer was decoded as the protocol's union of
	// answers; the SDK's handler answers with its own type.
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := new(R)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the caller's answer is not of the request's kind"}
	}
	return out, nil
}

// heldTarget returns the held call on the session that an upstream's
// request belongs to, as the SDK does not say which call a request
// belongs to: the session's one held call, or of several the one whose
// upstream may be asking. A call whose round went to its caller awaits
// the caller's answer, so its upstream is not asking.
func (c *conn) heldTarget(held *heldCalls) (*heldCall, error) {
	c.mu.Lock()
	ids := slices.Collect(maps.Keys(c.inflight))
	c.mu.Unlock()
	var calls, asking []*heldCall
	for _, id := range ids {
		held.mu.Lock()
		h := held.byInflight[id]
		held.mu.Unlock()
		if h == nil {
			continue
		}
		calls = append(calls, h)
		h.mu.Lock()
		if !h.handed && h.end == nil {
			asking = append(asking, h)
		}
		h.mu.Unlock()
	}
	switch {
	case len(calls) == 1:
		return calls[0], nil
	case len(asking) == 1:
		return asking[0], nil
	}
	return nil, errors.New("a request is passed to the caller only while exactly one call of the caller's on this upstream session may be asking")
}

// handleHeldRequests sets the SDK handlers that turn an upstream's
// requests into rounds (see heldCall), for what offers names (see
// round.offers): the session offers the upstream sampling, elicitation
// and roots only as the caller does. It returns the session's handler of
// roots/list, or nil.
func (c *conn) handleHeldRequests(o *mcp.ClientOptions, held *heldCalls, offers string) rootsHandler {
	if strings.Contains(offers, "sampling") {
		o.CreateMessageHandler = func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return heldRequest[*mcp.CreateMessageParams, mcp.CreateMessageResult](c, held, req.Params)
		}
	}
	if strings.Contains(offers, "elicitation") {
		o.ElicitationHandler = func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return heldRequest[*mcp.ElicitParams, mcp.ElicitResult](c, held, req.Params)
		}
	}
	if !strings.Contains(offers, "roots") {
		return nil
	}
	o.Capabilities.RootsV2 = &mcp.RootCapabilities{}
	return func(_ context.Context, req *mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
		return heldRequest[*mcp.ListRootsParams, mcp.ListRootsResult](c, held, req.Params)
	}
}

// offers names what of sampling, elicitation and roots the round's
// caller declared; an upstream session of rounds offers the same.
func (r *round) offers() string {
	var out []string
	if r.caps != nil && r.caps.Elicitation != nil {
		out = append(out, "elicitation")
	}
	if r.caps != nil && r.caps.Sampling != nil {
		out = append(out, "sampling")
	}
	if r.caps != nil && r.caps.RootsV2 != nil {
		out = append(out, "roots")
	}
	return strings.Join(out, " ")
}

// speaksRounds reports whether an upstream session's protocol has multi
// round-trip requests (2026-07-28 and later): an upstream of an earlier
// one asks for input with requests of its own (see heldCall).
func speaksRounds(cs *mcp.ClientSession) bool {
	ir := cs.InitializeResult()
	return ir != nil && ir.ProtocolVersion >= sessionlessVersion
}

// round waits for the held call's next round (see next): an incomplete
// tools/call result whose input requests are the upstream's (whatever the
// held request; see heldAsk), or the request's own result.
func (h *heldCall) round(ctx context.Context) (mcp.Result, error) {
	res, end := h.next(ctx)
	if end != nil {
		return end.res, end.err
	}
	return res, nil
}

// heldAskOf returns the input requests of a held request's round, nil
// for its result: a round is an incomplete tools/call result (see next),
// whatever the request; the request's result is of its own type.
func heldAskOf(res mcp.Result) *inputAsk {
	if r, ok := res.(*mcp.CallToolResult); ok && r.InputRequests != nil {
		return askOf(true, r.InputRequests, r.RequestState)
	}
	return nil
}

// heldGoneText answers a retry whose held call is no longer held.
const heldGoneText = "The call that asked for this input is no longer open: no answer came in time, or the server that held it stopped. " +
	"Nothing more of it runs. Call the tool again to start over."

// resumeHeld serves a later round of a held call of subject's: it
// delivers the caller's answer to the upstream's waiting request and
// waits for what the upstream does next, here or, through the handover,
// on the replica that holds the call, whose result decode reads (see
// heldResult). What cannot go on (the call is no longer held) is answered
// with refuse's answer to the caller, which says why.
func (u *upstream) resumeHeld(ctx context.Context, subject string, r *round, decode heldDecoder, refuse heldRefusal) (mcp.Result, error) {
	h, ok := u.cat.held.get(r.state)
	if id, _ := heldID(r.state); !ok && u.cat.handover != nil {
		// Another replica may hold it.
		return u.cat.handover.resume(ctx, id, subject, u.cfg.Name, r, decode, refuse)
	}
	if !ok || h.subject != subject || h.upstream != u.cfg.Name {
		return refuse(heldGoneText)
	}
	h.answer(r)
	return h.round(ctx)
}

// heldRefusal answers a retry of a held request that cannot go on, with
// the text that tells its caller why: a tool call with a tool error, a
// request of another kind with an error.
type heldRefusal func(text string) (mcp.Result, error)

// heldDecoder reads a held request's round or result as the replica that
// holds it passes it on (JSON).
type heldDecoder func(json.RawMessage) (mcp.Result, error)

// heldResult is the heldDecoder of a request whose result is a *T: a
// round, which has input requests, is read as the incomplete tools/call
// result it is (see heldAskOf).
func heldResult[T any, P interface {
	*T
	mcp.Result
}](b json.RawMessage) (mcp.Result, error) {
	var probe struct {
		InputRequests json.RawMessage `json:"inputRequests"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, err
	}
	if probe.InputRequests != nil {
		res := new(mcp.CallToolResult)
		if err := json.Unmarshal(b, res); err != nil {
			return nil, err
		}
		return res, nil
	}
	res := P(new(T))
	if err := json.Unmarshal(b, res); err != nil {
		return nil, err
	}
	return res, nil
}
