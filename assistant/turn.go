package assistant

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// errLeaseLost stops a turn whose run another process has taken over, or
// that was closed: it can write nothing more, and must not try.
var errLeaseLost = errors.New("assistant: the run's lease was lost")

// turn is one slice of work on a claimed run: it starts or resumes the
// run's open turn and works it until it ends, pauses for an approval, or
// yields the run back to the queue.
type turn struct {
	rt    *Runtime
	mu    sync.Mutex // guards lease, which the renewer updates
	run   store.Run
	lease store.Lease
	seq   int64 // the user message the turn answers
	sess  *session
	// messages are the turn's own message events so far: its user
	// message and what the turn wrote.
	messages []store.Event
	// after are the messages of earlier turns logged after the turn's
	// user message (it arrived while they ran): history, not the turn's.
	after []store.Event
	// queued reports user messages after the turn's, each waiting for a
	// turn of its own.
	queued bool
	// past is the history before the turn, in turn order, once read;
	// pastMsgs are its verbatim messages (beyond the summary) with their
	// sequences.
	past     []model.Message
	pastMsgs []contextMessage
	// snap is the run's latest context snapshot (nil: none), which
	// bounds the history when set (boundedTail); snapRead reports
	// that it was read.
	snap     *store.ContextSnapshot
	snapRead bool
	// compactTried reports that the slice tried to compact the run.
	compactTried bool
	// pending is the context accounting the turn's next write carries:
	// the estimate or the reported size of its latest model request.
	pending *store.RunContext
	// partial is the text of the model step in flight, not yet recorded:
	// what it streamed so far, or its whole answer. A stopped turn keeps
	// it (keepStopped).
	partial string
	// failed reports that the turn ends as failed.
	failed bool
	// step is the slice's step, once its first write opened it (nil
	// before); modelSteps and toolCalls count what the slice made.
	step                  *store.Step
	modelSteps, toolCalls int
	// system is the slice's system prompt, once read (systemPrompt).
	system *string
}

// work runs one claimed run until its lease is released. Every write it
// makes is fenced by the lease.
func (rt *Runtime) work(ctx context.Context, r store.Run) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := &turn{rt: rt, run: r, lease: r.Lease()}

	// Renew the lease while the turn works; losing it stops the turn.
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(rt.o.Lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l, err := rt.st.RenewLease(ctx, t.currentLease(), rt.o.Lease)
			if err != nil {
				if ctx.Err() == nil {
					rt.log.Warn("assistant: renewing a lease failed", "run", r.ID, "err", err)
					if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
						cancel(errLeaseLost)
						return
					}
				}
				continue
			}
			t.setLease(l)
		}
	}()
	defer func() { cancel(nil); <-renewed }()

	// Stop at once when the run's lease is fenced off (the person stopped
	// the turn, or closed the run): the run's status changes reach every
	// process, and this one reads the run once per change.
	sub, room, leave := rt.bus.joinRun(r.ID)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.status:
			}
			if now, err := room.run(ctx); err == nil && now.FencingToken != t.currentLease().Token {
				cancel(errLeaseLost)
				return
			}
		}
	}()
	defer func() { cancel(nil); <-watched; leave() }()

	// A panic fails the slice like any error: the run is retried, or its
	// turn ends visibly, and the process goes on.
	panicked := false
	end, err := func() (_ ending, err error) {
		defer func() {
			if p := recover(); p != nil {
				panicked = true
				rt.log.Error("assistant: a turn panicked", "run", r.ID, "panic", p, "stack", string(debug.Stack()))
				err = fmt.Errorf("assistant: the turn panicked: %v", p)
			}
		}()
		ctx, span := startTurn(ctx, r)
		defer func() { endTurn(span, err) }()
		return t.work(ctx)
	}()
	leaseLost := errors.Is(err, errLeaseLost) || errors.Is(context.Cause(ctx), errLeaseLost)
	switch {
	case t.sess != nil && (panicked || t.failed || (err != nil && !leaseLost && ctx.Err() == nil)):
		// A failed turn releases its session: the next builds a new one.
		rt.holder.drop(t.sess, store.ReleaseTurnFailed)
	case t.sess != nil:
		rt.holder.release(t.sess, err == nil && end.rel.Status == store.RunAwaitingApproval)
	}
	switch {
	case errors.Is(err, errSliceBudget):
		rt.budgetStop(ctx, r)
		return
	case errors.Is(err, errLeaseLost) || errors.Is(context.Cause(ctx), errLeaseLost):
		rt.log.Info("assistant: a turn stopped: its run was taken over or closed", "run", r.ID)
		t.keepStopped(ctx)
		return
	case err != nil && ctx.Err() != nil:
		// The process is stopping: hand the run back, queued, so that
		// another process (or this one, restarted) resumes the turn at
		// once instead of after the lease expires. Should this fail, the
		// lease expires and the run is taken over all the same.
		handCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer done()
		if _, _, err := rt.st.EndLease(handCtx, t.currentLease(), store.Release{Requeue: true, Step: t.stepEnd(store.StepInterrupted)}); err != nil && !errors.Is(err, store.ErrConflict) {
			rt.log.Warn("assistant: handing a run back at shutdown failed", "run", r.ID, "err", err)
		}
		return
	case err != nil:
		// The run is queued for a retry after a backoff, or, when it
		// failed too often in a row, its turn ends as failed.
		rt.log.Error("assistant: a turn failed", "run", r.ID, "failures", r.Failures+1, "err", err)
		failCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer done()
		end = rt.failedSlice(failCtx, r)
		if end.rel.Retry > 0 {
			rt.retried.Add(1)
		}
	}
	releaseCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer done()
	end.rel.Step = t.stepEnd(cmp.Or(end.outcome, store.StepEnded))
	_, _, err = rt.st.EndLease(releaseCtx, t.currentLease(), end.rel, end.events...)
	switch {
	case errors.Is(err, store.ErrConflict):
		rt.log.Info("assistant: a turn stopped: its run was taken over or closed", "run", r.ID)
		t.keepStopped(ctx)
	case err != nil && len(end.events) > 0:
		// Release the run all the same, queued for a retry of the slice
		// after a backoff. Should this fail too, it is handed back once
		// the database answers, or the lease expires and the run is taken
		// over.
		rt.log.Error("assistant: ending a turn failed", "run", r.ID, "err", err)
		retry := store.Release{Retry: rt.retryBackoff(r.Failures), Step: t.stepEnd(store.StepFailed)}
		if _, _, err := rt.st.EndLease(releaseCtx, t.currentLease(), retry); err != nil && !errors.Is(err, store.ErrConflict) {
			rt.log.Error("assistant: releasing a run failed", "run", r.ID, "err", err)
			rt.handBack(ctx, t.currentLease(), retry)
		}
	case err != nil:
		rt.log.Error("assistant: releasing a run failed", "run", r.ID, "err", err)
		rt.handBack(ctx, t.currentLease(), end.rel)
	}
}

// handBackEvery bounds the wait between handBack's attempts.
const handBackEvery = time.Second

// handBack keeps trying to end the lease l with rel, which the store could
// not be reached to end, until it answers, the lease expires or ctx ends:
// a run whose release failed in a database outage is queued again as soon
// as the database is back, not only once its lease has expired (up to
// Options.Lease later). A release that did commit, its answer lost, is
// met with ErrConflict, as is one after another replica took the run.
func (rt *Runtime) handBack(ctx context.Context, l store.Lease, rel store.Release) {
	for wait := handBackEvery / 10; rt.o.Now().Before(l.ExpiresAt); wait = min(2*wait, handBackEvery) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		try, cancel := context.WithTimeout(ctx, 5*handBackEvery)
		_, _, err := rt.st.EndLease(try, l, rel)
		cancel()
		switch {
		case err == nil:
			rt.log.Info("assistant: a run whose release failed was released once the database answered", "run", l.RunID)
			return
		case errors.Is(err, store.ErrConflict):
			return
		}
	}
}

// ending is how a slice of work on a run ends: the events its lease
// appends as it ends (the turn's last message and end, or its pause), in
// the same transaction, how the run is left, and the outcome of the
// slice's step (empty: ended).
type ending struct {
	events  []store.NewEvent
	rel     store.Release
	outcome store.StepOutcome
}

// turnFailure ends a turn visibly: the model or the tools failed, and the
// turn's end says so.
type turnFailure struct {
	message string
}

func (f *turnFailure) Error() string { return "assistant: the turn failed: " + f.message }

// currentLease and setLease guard the lease the renewer updates.
func (t *turn) currentLease() store.Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lease
}

func (t *turn) setLease(l store.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lease = l
}

// append writes events under the lease, and the pending context
// accounting with them (then events may be none).
func (t *turn) append(ctx context.Context, events ...store.NewEvent) ([]store.Event, error) {
	var out []store.Event
	var err error
	if t.pending != nil {
		out, err = t.rt.st.RecordContext(ctx, t.currentLease(), *t.pending, events...)
	} else {
		out, err = t.rt.st.AppendLeased(ctx, t.currentLease(), events...)
	}
	if errors.Is(err, store.ErrConflict) {
		return nil, errLeaseLost
	}
	if err != nil {
		return nil, err
	}
	t.pending = nil
	for _, e := range out {
		if isMessageEvent(e.Type) {
			t.messages = append(t.messages, e)
		}
	}
	return out, nil
}

func isMessageEvent(typ string) bool {
	return typ == EventUserMessage || typ == EventAssistantMessage || typ == EventToolResult
}

// work does the slice and returns how it ends: with the context
// accounting still pending, which the end of the lease records.
func (t *turn) work(ctx context.Context) (ending, error) {
	end, err := t.slice(ctx)
	if f := (*turnFailure)(nil); errors.As(err, &f) {
		end, err = t.finish(TurnFailed, f.message), nil
		t.failed = true
	}
	if err == nil {
		end.rel.Context = t.pending
	}
	return end, err
}

// slice works the turn until it ends, pauses or yields.
func (t *turn) slice(ctx context.Context) (ending, error) {
	rt := t.rt
	starting := t.run.TurnSeq == 0
	if err := t.load(ctx); err != nil || t.seq == 0 {
		return ending{}, err
	}
	// The slice's first write: its step, within the run's budget.
	if err := t.startStep(ctx, starting); err != nil {
		return ending{}, err
	}

	// A sender the turn's tokens cannot carry — whom the API refuses, but
	// whom a stored message may still name — ends the turn at once,
	// saying why, started first if it was not: every attempt to reach the
	// MCP server would be refused alike, and retrying would only make
	// the person wait.
	if unfit := checkSender(t.sender()); unfit != nil {
		end := t.finish(TurnFailed, unfit.Message)
		if starting {
			start := store.NewEvent{Type: EventTurnStart, Payload: mustJSON(TurnStart{MessageSeq: t.seq}), StartsTurn: t.seq}
			end.events = append([]store.NewEvent{start}, end.events...)
		}
		return end, nil
	}
	sess, held, err := rt.holder.acquire(ctx, t.grant())
	if err != nil {
		// Retried after a backoff, as any failed slice is: a replica
		// restarting or a connection lost at the wrong moment must not
		// end the turn; an MCP server that stays out of reach ends it
		// after maxFailures in a row.
		rt.log.Error("assistant: reaching the MCP server failed", "run", t.run.ID, "err", err)
		return ending{}, fmt.Errorf("assistant: reaching the MCP server: %w", err)
	}
	t.sess = sess
	if starting {
		delivery := "fresh"
		if held {
			delivery = "held"
		}
		history, err := t.history(ctx)
		if err != nil {
			return ending{}, err
		}
		chars := 0
		for _, m := range history {
			chars += utf8.RuneCountInString(m.Content)
		}
		// The context the first step sends, estimated, rides on the
		// turn's start.
		req, err := t.request(ctx)
		if err != nil {
			return ending{}, err
		}
		t.pending = t.estimated(req, t.lastSeq())
		if _, err := t.append(ctx,
			store.NewEvent{Type: EventTurnStart, Payload: mustJSON(TurnStart{MessageSeq: t.seq}), StartsTurn: t.seq},
			store.NewEvent{Type: EventSystemPrompt, Payload: mustJSON(SystemPromptRecord{
				RunID: t.run.ID, Characters: utf8.RuneCountInString(*t.system)})},
			store.NewEvent{Type: EventRuntimeContext, Payload: mustJSON(RuntimeContextRecord{
				RunID: t.run.ID, Messages: len(history), Characters: chars, Tools: len(sess.tools), Delivery: delivery})},
		); err != nil {
			return ending{}, err
		}
	}

	// Finish the calls the turn left open: crashed mid-call, beyond the
	// last slice's limit, or waiting for an approval that has now been
	// decided.
	budget := rt.o.MaxToolCallsPerSlice
	open, err := t.resolveOpenCalls(ctx, budget, nil)
	if err != nil {
		return ending{}, err
	}
	calls := open.ran
	switch {
	case open.left:
		return yield(), nil
	case len(open.waiting) > 0:
		return t.pause(open.waiting), nil
	}

	if t.answered() {
		// The turn's answer is recorded, its end is not (ending it
		// failed): end it now, rather than ask the model to go on from
		// its own answer.
		return t.finish(TurnCompleted, ""), nil
	}
	steps := t.stepsSoFar()
	sender := t.sender() // whose daily token limit the steps count against
	// accounted: the slice has recorded the context it sends first.
	accounted := starting
	for {
		if steps >= rt.o.MaxSteps {
			return ending{}, &turnFailure{message: fmt.Sprintf("The turn stopped after %d model steps, its limit.", rt.o.MaxSteps)}
		}
		if calls >= budget {
			return yield(), nil
		}
		if err := t.rt.checkTokens(ctx, t.run.Owner, sender, limitedTurn, nil); err != nil {
			return ending{}, err
		}
		req, err := t.request(ctx)
		if err != nil {
			return ending{}, err
		}
		est := t.estimated(req, t.lastSeq())
		if rebuild, err := t.maybeCompact(ctx, est); err != nil {
			return ending{}, err
		} else if rebuild {
			if req, err = t.request(ctx); err != nil {
				return ending{}, err
			}
			est = t.estimated(req, t.lastSeq())
		}
		if !accounted {
			// A resumed slice: nothing else is written before the step.
			t.pending = est
			if _, err := t.append(ctx); err != nil {
				return ending{}, err
			}
			accounted = true
		}
		resp, err := t.complete(ctx, req)
		if err == nil {
			t.partial = resp.Message.Content
		}
		if err != nil {
			var me *model.Error
			if errors.As(err, &me) && ctx.Err() == nil {
				return ending{}, &turnFailure{message: modelFailure(me)}
			}
			return ending{}, err
		}
		steps++
		t.modelSteps++
		t.pending = afterStep(est, resp.Usage)
		msg := AssistantMessage{Content: resp.Message.Content, MessageSeq: t.seq}
		argumentsErrors := make([]string, len(resp.Message.ToolCalls))
		for i, c := range resp.Message.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
			argumentsErrors[i] = c.ArgumentsError
		}
		reply := store.NewEvent{Type: EventAssistantMessage, Payload: mustJSON(msg), Preview: plainText(msg.Content)}
		if len(resp.Message.ToolCalls) == 0 {
			// The final answer, the turn's end and the release, in one
			// transaction.
			end := t.finish(TurnCompleted, "")
			end.events = append([]store.NewEvent{reply}, end.events...)
			return end, nil
		}
		if _, err := t.append(ctx, reply); err != nil {
			return ending{}, err
		}
		t.partial = ""
		// The calls run up to the slice's limit; the rest run in the
		// next slice, which resumes them as open calls.
		done, err := t.resolveOpenCalls(ctx, budget-calls, argumentsErrors)
		if err != nil {
			return ending{}, err
		}
		calls += done.ran
		switch {
		case done.left:
			return yield(), nil
		case len(done.waiting) > 0:
			return t.pause(done.waiting), nil
		}
	}
}

// keepStopped keeps the text of the model step in flight when the turn
// was stopped: its partial reply, marked stopped, so that the person sees
// what was streamed and the next turn's model reads it. The store keeps it
// only after a stop that fenced off this very lease, and once; a run
// taken over or closed keeps nothing.
func (t *turn) keepStopped(ctx context.Context) {
	if strings.TrimSpace(t.partial) == "" || t.seq == 0 {
		return
	}
	ctx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer done()
	msg := AssistantMessage{Content: t.partial, MessageSeq: t.seq, Stopped: true}
	_, err := t.rt.st.KeepStoppedReply(ctx, t.currentLease(),
		store.NewEvent{Type: EventAssistantMessage, Payload: mustJSON(msg), Preview: plainText(msg.Content)})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		t.rt.log.Warn("assistant: keeping a stopped turn's partial reply failed", "run", t.run.ID, "err", err)
	}
}

// yield ends the slice with the turn open, the run queued again as the
// lease ends, so that it is claimable at once.
func yield() ending { return ending{rel: store.Release{Requeue: true}, outcome: store.StepYielded} }

// grant is what the turn's tokens say: the owner, the run, and the tenant
// and groups the turn's user message was sent with.
func (t *turn) grant() Grant {
	s := t.sender()
	return Grant{Owner: t.run.Owner, RunID: t.run.ID, Tenant: s.Tenant, Groups: s.Groups}
}

// sender is who sent the turn's user message, as it records them.
func (t *turn) sender() Sender {
	if len(t.messages) > 0 && t.messages[0].Type == EventUserMessage {
		var m UserMessage
		if json.Unmarshal(t.messages[0].Payload, &m) == nil && m.Sender != nil {
			return *m.Sender
		}
	}
	return Sender{}
}

// nextUserMessage finds the first user message after the last handled
// one: the message the next turn answers, or 0 for none.
func (rt *Runtime) nextUserMessage(ctx context.Context, r store.Run) (int64, error) {
	after := r.HandledSeq
	for {
		page, err := rt.st.ListMessages(ctx, r.ID, store.MessageQuery{After: after, Limit: 100, Branch: &r.ActiveBranch})
		if err != nil || len(page) == 0 {
			return 0, err
		}
		for _, e := range page {
			if e.Type == EventUserMessage {
				return e.Seq, nil
			}
		}
		after = page[len(page)-1].Seq
	}
}

// turnWindowExtra is how many messages beyond the history load reads at
// once, for the turn's own messages: its user message, those of a turn
// resumed, and user messages queued behind it.
const turnWindowExtra = 16

// load finds the user message the turn answers (t.seq; 0 when there is
// none) and reads the messages from that message on (the turn's, those of
// earlier turns that ran while it waited, and user messages queued
// behind it) and the history before it. One read of the run's latest
// messages holds all of it when the turn's messages are few, as they are
// in a conversation taking turns one after the other; otherwise each is
// read on its own.
func (t *turn) load(ctx context.Context) error {
	window := t.rt.o.HistoryMessages + turnWindowExtra
	latest, err := t.rt.st.ListMessages(ctx, t.run.ID, store.MessageQuery{Limit: window, Last: true, Branch: &t.run.ActiveBranch})
	if err != nil {
		return err
	}
	// Whether latest holds every message: of the log, or after from.
	whole := len(latest) < window
	holdsAfter := func(from int64) bool { return whole || (len(latest) > 0 && latest[0].Seq <= from) }

	seq := t.run.TurnSeq
	if seq == 0 {
		if !holdsAfter(t.run.HandledSeq) {
			return t.loadEach(ctx)
		}
		for _, e := range latest {
			if e.Seq > t.run.HandledSeq && e.Type == EventUserMessage {
				seq = e.Seq
				break
			}
		}
		if seq == 0 {
			return nil // nothing to answer
		}
	}
	at := slices.IndexFunc(latest, func(e store.Event) bool { return e.Seq >= seq })
	if at < 0 || latest[at].Seq != seq || (at < t.rt.o.HistoryMessages && !whole) {
		return t.loadEach(ctx)
	}
	t.seq = seq
	if err := t.split(slices.Clone(latest[at:])); err != nil {
		return err
	}
	if err := t.readSnapshot(ctx); err != nil {
		return err
	}
	return t.setPast(latest[max(0, at-t.rt.o.HistoryMessages):at])
}

// loadEach is load by separate reads: the message to answer, the messages
// from it on, the history.
func (t *turn) loadEach(ctx context.Context) error {
	t.seq = t.run.TurnSeq
	if t.seq == 0 {
		seq, err := t.rt.nextUserMessage(ctx, t.run)
		if err != nil || seq == 0 {
			return err
		}
		t.seq = seq
	}
	from, err := t.messagesFrom(ctx)
	if err != nil {
		return err
	}
	if err := t.split(from); err != nil {
		return err
	}
	_, err = t.history(ctx)
	return err
}

// messagesFrom reads the run's messages from the turn's user message on.
func (t *turn) messagesFrom(ctx context.Context) ([]store.Event, error) {
	after := t.seq - 1
	var out []store.Event
	for {
		page, err := t.rt.st.ListMessages(ctx, t.run.ID, store.MessageQuery{After: after, Limit: 500, Branch: &t.run.ActiveBranch})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < 500 {
			return out, nil
		}
		after = page[len(page)-1].Seq
	}
}

// split sorts the messages from the turn's user message on (from, which
// starts with it) by turn: the turn's own, those of earlier turns, and
// the user messages queued behind the turn.
func (t *turn) split(from []store.Event) error {
	msgs, err := inTurns(from)
	if err != nil {
		return err
	}
	t.messages, t.after, t.queued = nil, nil, false
	for _, m := range msgs {
		switch {
		case m.turn == t.seq:
			t.messages = append(t.messages, m.Event)
		case m.turn < t.seq:
			t.after = append(t.after, m.Event)
		case m.Type == EventUserMessage:
			t.queued = true
		}
	}
	return nil
}

// readSnapshot reads the run's latest context snapshot, once per slice.
func (t *turn) readSnapshot(ctx context.Context) error {
	if t.snapRead {
		return nil
	}
	snap, err := t.rt.st.LatestSnapshot(ctx, t.run.ID)
	switch {
	case err == nil:
		t.snap = &snap
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	t.snapRead = true
	return nil
}

// setPast makes the history of the turn from the messages logged before
// its user message (before) and those of earlier turns logged after it.
// With a snapshot, it is the snapshot's summary and the messages after
// its coverage, bounded (boundedTail): before holds the latest
// HistoryMessages messages before the turn, so those after the coverage
// are among them.
func (t *turn) setPast(before []store.Event) error {
	msgs, err := inTurns(slices.Concat(before, t.after))
	if err != nil {
		return err
	}
	past, err := projectSeqs(turnOrder(msgs))
	if err != nil {
		return err
	}
	if t.snap != nil {
		past = boundedTail(t.snap, past, t.rt.o.HistoryMessages)
	}
	t.pastMsgs, t.past = past, withSummary(t.snap, past)
	return nil
}

// history is the fresh session's past, in turn order: the latest
// HistoryMessages messages logged before the turn's user message, and the
// messages of earlier turns logged after it, as model messages; with a
// context snapshot, its summary and, of those, the messages after its
// coverage (setPast). It is read once per turn: nothing of earlier turns
// changes while the turn runs.
func (t *turn) history(ctx context.Context) ([]model.Message, error) {
	if t.past != nil {
		return t.past, nil
	}
	if err := t.readSnapshot(ctx); err != nil {
		return nil, err
	}
	events, err := t.rt.st.ListMessages(ctx, t.run.ID, store.MessageQuery{Before: t.seq, Limit: t.rt.o.HistoryMessages, Last: true, Branch: &t.run.ActiveBranch})
	if err != nil {
		return nil, err
	}
	if err := t.setPast(events); err != nil {
		return nil, err
	}
	return t.past, nil
}

// request builds the model request of the next step: the system prompt,
// the history, and the turn so far (with a context snapshot that reaches
// into the turn, what is after its coverage: turnTail).
func (t *turn) request(ctx context.Context) (model.Request, error) {
	history, err := t.history(ctx)
	if err != nil {
		return model.Request{}, err
	}
	if err := t.connected(ctx); err != nil {
		return model.Request{}, err
	}
	own, err := projectSeqs(t.messages)
	if err != nil {
		return model.Request{}, err
	}
	current := turnTail(t.snap, own)
	system, err := t.systemPrompt(ctx)
	if err != nil {
		return model.Request{}, err
	}
	msgs := make([]model.Message, 0, 1+len(history)+len(current))
	msgs = append(msgs, model.Message{Role: model.RoleSystem, Content: system})
	msgs = append(msgs, history...)
	msgs = append(msgs, current...)
	if msgs, err = t.rt.withAttachments(ctx, msgs); err != nil {
		return model.Request{}, err
	}
	return model.Request{Messages: msgs, Tools: t.sess.tools, Model: t.rt.requestModel(t.run)}, nil
}

// modelFailure is what a turn whose model step failed with me says: the
// failure, as a sentence, and, when it was worth retrying, that complete
// tried it three times ("The model did not finish within 2m0s. Tried 3
// times.").
func modelFailure(me *model.Error) string {
	text := "The model failed."
	if me.Message != "" {
		text = strings.ToUpper(me.Message[:1]) + me.Message[1:] + "."
	}
	if me.Retryable {
		text += fmt.Sprintf(" Tried %d times.", modelAttempts)
	}
	return text
}

// modelAttempts is how many times complete tries a model step whose
// failure is worth retrying.
const modelAttempts = 3

// complete runs one model step, retrying a retryable failure twice.
func (t *turn) complete(ctx context.Context, req model.Request) (model.Response, error) {
	var resp model.Response
	var err error
	for attempt := 0; ; attempt++ {
		deltas := &deltaStream{rt: t.rt, runID: t.run.ID, messageSeq: t.seq}
		mctx, span := startModel(ctx, cmp.Or(req.Model, t.rt.o.ModelName))
		resp, err = t.rt.turnModel.Complete(withUsageOwner(mctx, t.run.Owner), req, deltas.add)
		endModel(span, resp, err)
		deltas.flush(ctx)
		t.partial = deltas.all.String()
		var me *model.Error
		if err == nil || attempt == modelAttempts-1 || !errors.As(err, &me) || !me.Retryable || ctx.Err() != nil {
			return resp, err
		}
		// What the failed attempt streamed is void: the retry streams
		// its reply anew, which the pages following the run show in its
		// place.
		if deltas.all.Len() > 0 {
			t.restarted(ctx, attempt+2)
		}
		select {
		case <-ctx.Done():
			return resp, err
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		}
	}
}

// EventStepRestart records that a model step that had streamed text is
// tried again (attempt, from 2): the text streamed since the turn's last
// message is void, and the retry streams its own.
const EventStepRestart = "agent.step.restart"

// StepRestart is the payload of an agent.step.restart event.
type StepRestart struct {
	MessageSeq int64 `json:"messageSeq"`
	Attempt    int   `json:"attempt"`
}

// restarted appends an agent.step.restart before the step's next attempt.
// The context accounting stays pending, and a failure to append is only
// logged: the retry goes on without it.
func (t *turn) restarted(ctx context.Context, attempt int) {
	ev := store.NewEvent{Type: EventStepRestart, Payload: mustJSON(StepRestart{MessageSeq: t.seq, Attempt: attempt})}
	if _, err := t.rt.st.AppendLeased(ctx, t.currentLease(), ev); err != nil {
		t.rt.log.Debug("assistant: recording a model step's restart failed", "run", t.run.ID, "err", err)
	}
}

// stepsSoFar counts the turn's model steps already taken.
func (t *turn) stepsSoFar() int {
	n := 0
	for _, e := range t.messages {
		if e.Type == EventAssistantMessage {
			n++
		}
	}
	return n
}

// answered reports whether the turn's last message is an answer: an
// assistant message without tool calls.
func (t *turn) answered() bool {
	if len(t.messages) == 0 {
		return false
	}
	last := t.messages[len(t.messages)-1]
	if last.Type != EventAssistantMessage {
		return false
	}
	var m AssistantMessage
	return json.Unmarshal(last.Payload, &m) == nil && len(m.ToolCalls) == 0
}

// callTool runs one call of the assistant message at seq and records its
// result. A call whose arguments were not a JSON object is not run: its
// result is argumentsError.
func (t *turn) callTool(ctx context.Context, seq int64, c ToolCall, argumentsError string) (ToolResult, error) {
	var r ToolResult
	if argumentsError != "" {
		r = ToolResult{ToolCallID: c.ID, Name: c.Name, Content: argumentsError, IsError: true, Status: ToolFailed}
	} else {
		if err := t.connected(ctx); err != nil {
			return ToolResult{}, err
		}
		var err error
		key := callKey(seq, c.ID)
		r, err = t.sess.call(ctx, key, c)
		// A call whose answer was lost may have run: it is asked again,
		// under the same key, on a new connection (perhaps to another
		// replica), and the MCP server answers from the call's execution
		// record instead of running it twice.
		for try := 1; err != nil && ctx.Err() == nil && lostAfterSending(err); try++ {
			t.rt.holder.drop(t.sess, store.ReleaseLost)
			t.sess = nil
			t.rt.log.Warn("assistant: a tool call's answer was lost; asking again under its key", "run", t.run.ID, "tool", c.Name, "try", try, "err", err)
			if try > maxLostAnswers {
				r, err = outcomeUnknown(c), nil
				break
			}
			if err = t.connected(ctx); err != nil {
				t.rt.log.Error("assistant: reconnecting to the MCP server failed", "run", t.run.ID, "err", err)
				r, err = outcomeUnknown(c), nil
				break
			}
			r, err = t.sess.call(ctx, key, c)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ToolResult{}, err
			}
			t.rt.holder.drop(t.sess, store.ReleaseTurnFailed)
			t.sess = nil
			t.rt.log.Error("assistant: a tool call failed to reach the MCP server", "run", t.run.ID, "tool", c.Name, "err", err)
			return ToolResult{}, &turnFailure{message: "The assistant lost its connection to its tools. Send a message to try again."}
		}
	}
	return r, t.record(ctx, r)
}

// connected makes sure the turn has a session with the MCP server:
// connecting a new one when the last one was dropped.
func (t *turn) connected(ctx context.Context) error {
	if t.sess != nil {
		return nil
	}
	sess, _, err := t.rt.holder.acquire(ctx, t.grant())
	if err != nil {
		return fmt.Errorf("assistant: reaching the MCP server: %w", err)
	}
	t.sess = sess
	return nil
}

// maxLostAnswers bounds how often a call whose answer was lost is asked
// again before the model is told that its outcome is unknown.
const maxLostAnswers = 2

// outcomeUnknown is the result of a call that was sent and whose answer
// never came back, even when asked again under its key: it may have run.
func outcomeUnknown(c ToolCall) ToolResult {
	return ToolResult{ToolCallID: c.ID, Name: c.Name, IsError: true, Status: ToolFailed,
		Content: "The connection to the tools was lost after this call was sent, and asking again did not get its answer: " +
			"its outcome is unknown (it may or may not have run). Check its effect before making it again."}
}

// record appends a result of one of the turn's calls.
func (t *turn) record(ctx context.Context, r ToolResult) error {
	r.MessageSeq = t.seq
	_, err := t.append(ctx, store.NewEvent{Type: EventToolResult, Payload: mustJSON(r)})
	return err
}

// argumentsNotObject answers a call, resumed, whose arguments were not a
// JSON object (the model's own explanation is not recorded).
const argumentsNotObject = "The arguments of this call were not a JSON object; the call did not run."

// openCalls is what resolveOpenCalls did.
type openCalls struct {
	// ran counts the calls sent to the MCP server.
	ran int
	// waiting are the approvals still pending.
	waiting []string
	// left reports calls not run: the limit was reached.
	left bool
}

// resolveOpenCalls finishes the calls of the turn's last assistant message
// that have no final result, running at most limit of them, in order.
// argumentsErrors, when not nil, are the model's reasons why the calls'
// arguments were unusable, by position.
func (t *turn) resolveOpenCalls(ctx context.Context, limit int, argumentsErrors []string) (openCalls, error) {
	var last *AssistantMessage
	var seq int64
	// The results of the last assistant message's calls: a model may use
	// a call id again in a later step, for another call.
	results := map[string]ToolResult{}
	for _, e := range t.messages {
		switch e.Type {
		case EventAssistantMessage:
			var m AssistantMessage
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				return openCalls{}, err
			}
			last, seq = &m, e.Seq
			clear(results)
		case EventToolResult:
			var r ToolResult
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				return openCalls{}, err
			}
			results[r.ToolCallID] = r
		}
	}
	var out openCalls
	if last == nil {
		return out, nil
	}
	// run runs the call c, at position i, unless the limit was reached.
	run := func(i int, c ToolCall) (ToolResult, bool, error) {
		argumentsError := ""
		if i < len(argumentsErrors) {
			argumentsError = argumentsErrors[i]
		}
		if argumentsError == "" && (len(c.Arguments) == 0 || string(c.Arguments) == "null") {
			argumentsError = argumentsNotObject
		}
		if argumentsError == "" {
			if out.ran >= limit {
				out.left = true
				return ToolResult{}, false, nil
			}
			out.ran++
			t.toolCalls++
		}
		r, err := t.callTool(ctx, seq, c, argumentsError)
		return r, true, err
	}
	for i, c := range last.ToolCalls {
		r, ok := results[c.ID]
		if ok && r.Status != ToolApprovalPending {
			continue
		}
		if !ok {
			// No result at all: not run yet (the slice's limit was
			// reached), or the process stopped mid-call. The same call
			// again is safe: its idempotency key makes the MCP server
			// answer the recorded outcome instead of running it twice.
			r, ran, err := run(i, c)
			if err != nil || !ran {
				return out, err
			}
			if r.Status == ToolApprovalPending {
				out.waiting = append(out.waiting, r.Approval.ID)
			}
			continue
		}
		a, err := t.rt.st.GetApproval(ctx, r.Approval.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return out, err
		}
		switch {
		case errors.Is(err, store.ErrNotFound):
			r = ToolResult{ToolCallID: c.ID, Name: c.Name, IsError: true, Status: ToolFailed,
				Content: "The approval this call waited for no longer exists; the call did not run."}
		case a.Status == store.ApprovalPending:
			out.waiting = append(out.waiting, a.ID)
			continue
		case a.Status == store.ApprovalDenied:
			text := "A person denied this call; it did not run."
			if a.DecisionReason != "" {
				text += " Their reason: " + a.DecisionReason
			}
			r = ToolResult{ToolCallID: c.ID, Name: c.Name, IsError: true, Status: ToolDenied, Content: text}
		case a.Status == store.ApprovalApproved || a.Status == store.ApprovalConsumed:
			// Retry exactly the same call: the MCP server consumes the
			// approval, or, if it already did, answers the recorded
			// result of the one execution.
			if _, ran, err := run(i, c); err != nil || !ran {
				return out, err
			}
			continue
		default:
			r = ToolResult{ToolCallID: c.ID, Name: c.Name, IsError: true, Status: ToolFailed,
				Content: fmt.Sprintf("The approval of this call is %s; the call did not run.", a.Status)}
		}
		if err := t.record(ctx, r); err != nil {
			return out, err
		}
	}
	return out, nil
}

// pause ends the slice waiting for approvals: the pause is recorded as
// the run goes to AwaitingApproval.
func (t *turn) pause(approvals []string) ending {
	return ending{
		events:  []store.NewEvent{{Type: EventTurnPause, Payload: mustJSON(TurnPause{MessageSeq: t.seq, Approvals: approvals})}},
		rel:     store.Release{Status: store.RunAwaitingApproval},
		outcome: store.StepPaused,
	}
}

// finish ends the turn, whose start is recorded, with status (a slice that
// fails before that is retried, and failedSlice starts and ends a turn that
// never started). A user message that
// arrived before the run was claimed, and that this turn does not answer,
// queues the run again for its own turn (a message sent after the claim
// queued the run itself).
func (t *turn) finish(status, message string) ending {
	end := ending{outcome: store.StepEnded}
	end.events = append(end.events, t.endEvent(status, message))
	end.rel.Requeue = t.queued
	return end
}

// endEvent is the turn's agent.turn.end.
func (t *turn) endEvent(status, message string) store.NewEvent {
	return store.NewEvent{Type: EventTurnEnd, Payload: mustJSON(TurnEnd{MessageSeq: t.seq, Status: status, Error: message}), EndsTurn: true}
}

// deltaStream publishes the assistant text a model step streams, for live
// subscribers, in pieces of at most deltaFlushBytes or deltaFlushEvery.
// Deltas are never stored: the committed message follows them.
type deltaStream struct {
	rt         *Runtime
	runID      string
	messageSeq int64
	buf        strings.Builder
	last       time.Time
	// all is every piece of text streamed.
	all strings.Builder
}

const (
	deltaFlushBytes = 256
	deltaFlushEvery = 50 * time.Millisecond
)

func (d *deltaStream) add(text string) {
	d.all.WriteString(text)
	d.buf.WriteString(text)
	if d.buf.Len() >= deltaFlushBytes || time.Since(d.last) >= deltaFlushEvery {
		d.flush(context.Background())
	}
}

// flush publishes what is buffered, in pieces a notification can carry.
func (d *deltaStream) flush(ctx context.Context) {
	text := d.buf.String()
	d.buf.Reset()
	d.last = time.Now()
	for text != "" {
		piece := text
		if utf8.RuneCountInString(piece) > store.MaxDeltaText {
			piece = string([]rune(piece)[:store.MaxDeltaText])
		}
		text = text[len(piece):]
		err := d.rt.st.Publish(ctx, store.Notification{Kind: store.NotifyDelta, RunID: d.runID, MessageSeq: d.messageSeq, Text: piece})
		if err != nil {
			d.rt.log.Debug("assistant: publishing a delta failed", "run", d.runID, "err", err)
			return
		}
	}
}
