package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
)

// A held call (see heldCall) lives in the process that holds its
// upstream's stream, but its caller's retry may reach any replica. The
// replica that gets a retry of a call it does not hold passes the
// caller's answers on to every replica (store.NotifyHeldInput;
// LISTEN/NOTIFY on PostgreSQL); the one that holds the call confirms
// their receipt (store.NotifyHeldOutcome) and waits. The retry's replica
// answers the receipt with "go" only while it still waits for one: once
// it has told its caller the call is no longer open, it sends "withdraw"
// instead, and never "go". The holder delivers the answers only after
// "go", as a local retry would, and publishes what the upstream does next,
// which the retry's replica returns to the caller as its own. So a caller
// told that the call is no longer open is never wrong about its answers:
// they were not delivered, and the holder cancels the call when the
// withdrawal reaches it (or, without it, when its request expires
// unanswered).
//
// A retry that stops waiting (its caller left, or its call timeout
// passed) is withdrawn too, at any step: the holder then does what a local
// retry that stops waiting does (see heldCall.next), so the call is
// cancelled. The retry's replica has
// checked the sealed state and audited the answers before they go out;
// the holder checks that the call is the principal's, and that "go" and
// "withdraw" come from the replica that passed the answers on.

// HeldHandover passes the rounds of held calls between replicas (a
// store.Store does).
type HeldHandover interface {
	Publish(ctx context.Context, n store.Notification) error
	Updates(ctx context.Context) (<-chan store.Notification, error)
}

// heldReceiptWait is how long a retry waits for the replica that holds
// its call to confirm it got the answers: without a confirmation, no
// replica holds the call any more.
const heldReceiptWait = 5 * time.Second

// heldDelivery is the text of a store.NotifyHeldInput: a retry's answers
// and declared capabilities, and the id its outcome is published under;
// or, with a Step, what the retry's replica says of the delivery under
// that id after its receipt.
type heldDelivery struct {
	Reply     string                  `json:"r"`
	Upstream  string                  `json:"u"`
	Step      string                  `json:"s,omitempty"` // heldGo or heldWithdraw
	Caps      *mcp.ClientCapabilities `json:"c,omitempty"`
	Responses mcp.InputResponseMap    `json:"i,omitempty"`
}

// The steps of a delivery after its receipt.
const (
	// heldGo: the retry still waits; the holder delivers the answers.
	heldGo = "go"
	// heldWithdraw: the retry has given up (its receipt came too late, or
	// it stopped waiting); the holder cancels the call.
	heldWithdraw = "withdraw"
)

// heldOutcome is the text of a store.NotifyHeldOutcome: the receipt of a
// delivery, or the round's result or failure.
type heldOutcome struct {
	Received bool            `json:"a,omitempty"`
	Result   json.RawMessage `json:"res,omitempty"`
	Err      string          `json:"err,omitempty"`
	// Unknown: the failure leaves the call's outcome unknown.
	Unknown bool `json:"unk,omitempty"`
}

// heldRemoteError is a failure of a round on the replica that holds the
// call.
type heldRemoteError struct {
	text    string
	unknown bool
}

func (e *heldRemoteError) Error() string { return e.text }

func (e *heldRemoteError) Unwrap() error {
	if e.unknown {
		return errOutcomeUnknown
	}
	return nil
}

// handover passes the rounds of held calls between this catalog and the
// other replicas' (see HeldHandover).
type handover struct {
	cat         *Catalog
	pub         HeldHandover
	self        string        // this replica's name in what it publishes
	receiptWait time.Duration // heldReceiptWait

	mu      sync.Mutex
	waiting map[string]chan heldOutcome // the retries waiting here, by reply id
	pending map[string]*heldPending     // the deliveries held here, by reply id
}

// heldPending is a delivery whose receipt the holder has confirmed.
type heldPending struct {
	from     string             // the replica that passed it on
	goAhead  chan struct{}      // closed on heldGo
	withdraw context.CancelFunc // on heldWithdraw
}

// startHandover hears the rounds other replicas pass on, until the
// catalog closes.
func (c *Catalog) startHandover(pub HeldHandover) error {
	updates, err := pub.Updates(c.stop)
	if err != nil {
		return err
	}
	h := &handover{cat: c, pub: pub, self: rand.Text(), receiptWait: heldReceiptWait,
		waiting: map[string]chan heldOutcome{}, pending: map[string]*heldPending{}}
	c.handover = h
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		for n := range updates {
			switch {
			case n.From == h.self:
			case n.Kind == store.NotifyHeldInput:
				h.deliver(n)
			case n.Kind == store.NotifyHeldOutcome:
				h.mu.Lock()
				ch := h.waiting[n.Session]
				h.mu.Unlock()
				var o heldOutcome
				if ch != nil && json.Unmarshal([]byte(n.Text), &o) == nil {
					select {
					case ch <- o:
					default:
					}
				}
			}
		}
	}()
	return nil
}

// deliver serves a retry another replica received, if this one holds its
// call: it confirms the receipt and, once the retry's replica says go,
// delivers the answers and publishes what the upstream does next. A
// withdrawn delivery cancels the call instead (see startHandover). Until
// either comes, the delivery waits as long as the call is open.
func (h *handover) deliver(n store.Notification) {
	call, ok := h.cat.held.get(heldPrefix + n.Session)
	var d heldDelivery
	if !ok || call.subject != n.Owner || json.Unmarshal([]byte(n.Text), &d) != nil || d.Upstream != call.upstream || d.Reply == "" {
		return
	}
	if d.Step != "" {
		h.step(n.From, d)
		return
	}
	stop := h.cat.stop
	ctx, withdraw := context.WithCancel(stop)
	p := &heldPending{from: n.From, goAhead: make(chan struct{}), withdraw: withdraw}
	h.mu.Lock()
	if h.pending[d.Reply] != nil {
		h.mu.Unlock()
		withdraw()
		return // the same delivery again
	}
	h.pending[d.Reply] = p
	h.mu.Unlock()
	h.publish(stop, d.Reply, n.Owner, heldOutcome{Received: true})
	h.cat.work.Add(1)
	go func() {
		defer h.cat.work.Done()
		defer func() {
			h.mu.Lock()
			delete(h.pending, d.Reply)
			h.mu.Unlock()
			withdraw()
		}()
		select {
		case <-p.goAhead:
			if ctx.Err() != nil {
				// Withdrawn as well: the retry stopped waiting, so
				// nobody takes what the answers would bring.
				call.cancel()
				return
			}
			call.answer(&round{caps: d.Caps, responses: d.Responses})
		case <-ctx.Done():
			if stop.Err() == nil {
				call.cancel()
			}
			return
		case <-call.ctx.Done():
			// The call ended before the answers could go: its end is the
			// round's outcome.
		}
		// A withdrawal now is a retry that stops waiting mid-round,
		// which next handles as for a local retry.
		ctx, cancel := context.WithTimeout(ctx, h.cat.opts.CallTimeout)
		defer cancel()
		var o heldOutcome
		res, err := call.round(ctx)
		if err == nil {
			o.Result, err = json.Marshal(res)
		}
		if err != nil {
			o.Result, o.Err, o.Unknown = nil, err.Error(), errors.Is(err, errOutcomeUnknown)
		}
		h.publish(context.WithoutCancel(ctx), d.Reply, n.Owner, o)
	}()
}

// step passes what the retry's replica says of a pending delivery to it.
func (h *handover) step(from string, d heldDelivery) {
	h.mu.Lock()
	p := h.pending[d.Reply]
	h.mu.Unlock()
	if p == nil || p.from != from {
		return
	}
	switch d.Step {
	case heldGo:
		select {
		case <-p.goAhead:
		default:
			close(p.goAhead)
		}
	case heldWithdraw:
		p.withdraw()
	}
}

// publish sends an outcome to the retry waiting under reply.
func (h *handover) publish(ctx context.Context, reply, owner string, o heldOutcome) {
	b, err := json.Marshal(o)
	if err == nil {
		err = h.pub.Publish(ctx, store.Notification{Kind: store.NotifyHeldOutcome, Session: reply, Owner: owner, From: h.self, Text: string(b)})
	}
	if err != nil {
		h.cat.log.ErrorContext(ctx, "mcpserver: publishing a held call's round failed", "err", err)
	}
}

// resume serves a later round of a call held on another replica: it
// passes the answers on, says go once the holder confirms their receipt,
// and waits for that replica's outcome. A call no replica confirms
// holding within the receipt wait is no longer open: the delivery is
// withdrawn, so that a receipt that comes later delivers nothing. A retry
// that stops waiting is withdrawn too, and its outcome is unknown.
func (h *handover) resume(ctx context.Context, id, subject, upstream string, r *round, decode heldDecoder, refuse heldRefusal) (mcp.Result, error) {
	reply := rand.Text()
	ch := make(chan heldOutcome, 2)
	h.mu.Lock()
	h.waiting[reply] = ch
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.waiting, reply)
		h.mu.Unlock()
	}()
	b, err := json.Marshal(heldDelivery{Reply: reply, Upstream: upstream, Caps: r.caps, Responses: r.responses})
	if err != nil {
		return nil, err
	}
	if len(b) > store.MaxMCPAnswer {
		return refuse("The answers are too large to pass on to the server that holds the call. Nothing was sent.")
	}
	say := func(ctx context.Context, step string) error {
		b, err := json.Marshal(heldDelivery{Reply: reply, Upstream: upstream, Step: step})
		if err == nil {
			err = h.pub.Publish(ctx, store.Notification{Kind: store.NotifyHeldInput, Session: id, Owner: subject, From: h.self, Text: string(b)})
		}
		return err
	}
	withdraw := func() {
		if err := say(context.WithoutCancel(ctx), heldWithdraw); err != nil {
			// Without it, the holder cancels the call once its request
			// expires, as no answer comes.
			h.cat.log.ErrorContext(ctx, "mcpserver: withdrawing a held call's round failed", "err", err)
		}
	}
	if err := h.pub.Publish(ctx, store.Notification{Kind: store.NotifyHeldInput, Session: id, Owner: subject, From: h.self, Text: string(b)}); err != nil {
		// It may have gone out nonetheless.
		withdraw()
		return nil, fmt.Errorf("passing the answers on to the server that holds the call: %w", err)
	}
	receipt := time.NewTimer(h.receiptWait)
	defer receipt.Stop()
	unconfirmed := receipt.C
	for {
		select {
		case o := <-ch:
			switch {
			case o.Received:
				if unconfirmed == nil {
					continue
				}
				unconfirmed = nil
				if err := say(ctx, heldGo); err != nil {
					withdraw()
					return nil, fmt.Errorf("%w: telling the server that holds the call to deliver the answers: %v", errOutcomeUnknown, err)
				}
			case o.Err != "":
				return nil, &heldRemoteError{text: o.Err, unknown: o.Unknown}
			default:
				res, err := decode(o.Result)
				if err != nil {
					return nil, fmt.Errorf("%w: the held call's result is unreadable: %v", errOutcomeUnknown, err)
				}
				return res, nil
			}
		case <-unconfirmed:
			withdraw()
			return refuse(heldGoneText)
		case <-ctx.Done():
			withdraw()
			return nil, fmt.Errorf("%w: waiting for the server that holds the call: %v", errOutcomeUnknown, ctx.Err())
		}
	}
}
