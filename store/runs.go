package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Event types the store itself relies on.
const (
	// EventTurnEnd closes a turn; CloseRun and DeleteRun append it when
	// they end a turn that is still open.
	EventTurnEnd = "agent.turn.end"
	// MessageEventPrefix starts the type of every conversation message
	// (user, assistant, tool result): ListMessages returns those events.
	MessageEventPrefix = "message."
	// EventUserMessage is a user's message: a run with one after its
	// HandledSeq has work, which a release queues and RunsToResume finds.
	EventUserMessage = MessageEventPrefix + "user"
	// EventBranchSwitch records that SwitchBranch made another branch
	// active: {"branch": the branch now active, "from": the one before}.
	// It is appended on the branch now active, so that every follower of
	// the log learns of the switch.
	EventBranchSwitch = "agent.branch.switch"
	// EventBranchDelete records that DeleteMessage made a branch without
	// a message: {"deletes": the message, "untilSeq": the first message
	// the branch keeps after it (absent when none), "from": the branch
	// left}. It is the new branch's first event, so that every follower
	// of the log learns of the deletion.
	EventBranchDelete = "agent.branch.delete"
)

// TurnEndFunc returns the events that end the turn answering the user
// message turnSeq, when StopTurn stops it or CloseRun or DeleteRun ends
// its run: one event that ends the turn (EndsTurn), preceded, for a turn
// that never started (started false), by its start (StartsTurn turnSeq).
type TurnEndFunc func(turnSeq int64, started bool) []NewEvent

// NewEvent is an event to append to a run's log; the store assigns its
// sequence and time.
type NewEvent struct {
	Type    string
	Payload json.RawMessage
	// Preview, when not empty, becomes the run's Preview (cut to
	// MaxPreview bytes). A message event (Type starting with
	// MessageEventPrefix) also counts in the run's MessageCount.
	Preview string
	// StartsTurn, when positive, opens the turn that answers the user
	// message of that sequence (Run.TurnSeq).
	StartsTurn int64
	// EndsTurn closes the open turn: HandledSeq becomes its TurnSeq, and
	// TurnSeq 0.
	EndsTurn bool
	// Trace, on the message that queues its run (OpenRun's first event,
	// PostMessage, PostMessageOnce, ForkRun's message), is the trace context of the request
	// that posted it. The store keeps it on the run (Run.QueuedTrace), not
	// in the event; other writes ignore it.
	Trace TraceContext
}

// TraceContext is a W3C trace context as its headers carry it: the
// traceparent (at most MaxTraceParent bytes) and the tracestate (at most
// MaxTraceState bytes), both printable ASCII. The zero value is no trace.
type TraceContext struct {
	Parent string
	State  string
}

// The most bytes of a TraceContext's parts. A traceparent of the current
// version is 55 bytes; 512 bytes is what W3C trace context asks every
// participant to pass on of a tracestate.
const (
	MaxTraceParent = 128
	MaxTraceState  = 512
)

// MaxPreview is the most bytes of a run's Preview.
const MaxPreview = 200

// Lease is one process's claim on a run's turn work. Writes made under it
// are fenced: they fail once another process has claimed the run.
type Lease struct {
	RunID     string
	Owner     string
	Token     int64
	ExpiresAt time.Time
}

// Lease returns the lease the run currently records.
func (r Run) Lease() Lease {
	return Lease{RunID: r.ID, Owner: r.LeaseOwner, Token: r.FencingToken, ExpiresAt: r.LeaseExpiresAt}
}

// MessageQuery selects a window of a run's messages by sequence.
type MessageQuery struct {
	// After and Before bound the sequences, exclusively; 0 leaves a side
	// open.
	After, Before int64
	// Limit is the most messages returned; required.
	Limit int
	// Last returns the last Limit messages of the window instead of the
	// first (still in ascending order).
	Last bool
	// Branch, when not nil, names the branch whose line is read (see
	// Branch); nil reads the run's active branch, in the same statement.
	// A caller that holds the run (a turn, its claimed run) names its
	// ActiveBranch: the original line, 0, then reads as fast as a run
	// that never branched.
	Branch *int64
}

// isMessage reports whether an event of type typ is a conversation message.
func isMessage(typ string) bool { return strings.HasPrefix(typ, MessageEventPrefix) }

// preparedEvent is a NewEvent checked and ready to insert.
type preparedEvent struct {
	NewEvent
	message bool
}

// prepareEvents validates events and copies their payloads.
func prepareEvents(events []NewEvent) ([]preparedEvent, error) {
	if len(events) == 0 {
		return nil, invalid(errors.New("no events to append"))
	}
	out := make([]preparedEvent, len(events))
	for i, e := range events {
		p, err := eventPayload(e.Type, e.Payload)
		if err != nil {
			return nil, err
		}
		// Neither engine stores text that is not UTF-8 (PostgreSQL
		// refuses it; the batch's JSON would replace it on SQLite).
		if err := invalid(checkText("event type", e.Type), checkText("event payload", string(p))); err != nil {
			return nil, err
		}
		if e.StartsTurn < 0 || (e.StartsTurn > 0 && e.EndsTurn) {
			return nil, invalid(fmt.Errorf("event %s: StartsTurn %d with EndsTurn %t", e.Type, e.StartsTurn, e.EndsTurn))
		}
		if err := checkTraceContext(e.Trace); err != nil {
			return nil, invalid(fmt.Errorf("event %s: %w", e.Type, err))
		}
		e.Payload = p
		e.Preview = cutPreview(e.Preview)
		out[i] = preparedEvent{NewEvent: e, message: isMessage(e.Type)}
	}
	return out, nil
}

// appendPlan is what appending a batch of events does to the run's row,
// folded over the events in order, so that one statement advances the run
// for the whole batch: its sequence by len(events), and its summary and
// turn as the events would one after the other.
type appendPlan struct {
	events   []preparedEvent
	messages int    // message events among them
	preview  string // the last non-empty preview; empty keeps the run's
	// turn is the run's open turn after the events; -1 keeps it.
	turn int64
	// handled says what the run's HandledSeq becomes: handledKeep,
	// handledFromTurn (the turn open before the events) or handledSet
	// (handledSeq).
	handled    int
	handledSeq int64
}

// The values of appendPlan.handled.
const (
	handledKeep = iota
	handledFromTurn
	handledSet
)

// planAppend folds prepared events into one appendPlan.
func planAppend(events []preparedEvent) appendPlan {
	p := appendPlan{events: events, turn: -1}
	for _, e := range events {
		if e.message {
			p.messages++
		}
		if e.Preview != "" {
			p.preview = e.Preview
		}
		switch {
		case e.StartsTurn > 0:
			p.turn = e.StartsTurn
		case e.EndsTurn && p.turn < 0:
			p.handled, p.turn = handledFromTurn, 0
		case e.EndsTurn:
			p.handled, p.handledSeq, p.turn = handledSet, p.turn, 0
		}
	}
	return p
}

// appended returns the events of p as appended at createdAt to the run
// r, whose sequence is now r.LastSeq: they hold the last len(p.events)
// sequences, on its active branch.
func (p appendPlan) appended(r Run, createdAt time.Time) []Event {
	out := make([]Event, len(p.events))
	first := r.LastSeq - int64(len(p.events)) + 1
	for i, e := range p.events {
		out[i] = Event{RunID: r.ID, Seq: first + int64(i), Type: e.Type, Payload: e.Payload, CreatedAt: createdAt, Branch: r.ActiveBranch}
	}
	return out
}

// batch encodes the plan's events for advancing's $9 and insertBatch: a
// JSON array of [type, payload] pairs of strings, so that SQLite stores
// each payload's text as it was given.
func (p appendPlan) batch() (string, error) {
	pairs := make([][2]string, len(p.events))
	for i, e := range p.events {
		pairs[i] = [2]string{e.Type, string(e.Payload)}
	}
	b, err := json.Marshal(pairs)
	return string(b), err
}

// Release is how EndLease leaves a run.
type Release struct {
	// Status is what the run goes to: InProgress (or empty), which keeps
	// it, or AwaitingApproval, which pauses it for an approval.
	Status RunStatus
	// Requeue queues the run for another turn (as RequeueRun does) while
	// the lease still holds it, so that it can be claimed the moment the
	// lease ends: for a turn that yields, or a user message that arrived
	// before the claim and waits for its own turn. Only with InProgress.
	Requeue bool
	// Retry, when positive, queues the run for a retry of a slice that
	// failed, claimable no sooner than Retry from now, and counts the
	// failure in Run.Failures; any other release resets the count. Only
	// with InProgress.
	Retry time.Duration
	// Context, when not nil, is recorded as the run's Context in the same
	// write, as RecordContext does.
	Context *RunContext
	// Step, when not nil, ends the step the lease holds (StartStep), in
	// the same write, and appends its EventStepEnd after the events.
	// Nothing is ended when the lease holds no open step.
	Step *StepEnd
}

// checkRelease validates r and returns it with its status filled in.
func checkRelease(r Release) (Release, error) {
	switch r.Status {
	case "":
		r.Status = RunInProgress
	case RunInProgress:
	case RunAwaitingApproval:
		if r.Requeue || r.Retry > 0 {
			return Release{}, invalid(errors.New("a run released to AwaitingApproval cannot be requeued"))
		}
	default:
		return Release{}, invalid(fmt.Errorf("a released run goes to InProgress or AwaitingApproval, not %q", r.Status))
	}
	if r.Retry < 0 {
		return Release{}, invalid(fmt.Errorf("a release's retry backoff is %s", r.Retry))
	}
	if r.Retry > 0 {
		r.Requeue = true
	}
	if r.Context != nil {
		if err := checkRunContext(*r.Context); err != nil {
			return Release{}, err
		}
	}
	if r.Step != nil {
		if err := checkStepEnd(*r.Step); err != nil {
			return Release{}, err
		}
	}
	return r, nil
}

// cutPreview shortens s to at most MaxPreview bytes on a rune boundary and
// folds its whitespace to single spaces.
func cutPreview(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= MaxPreview {
		return s
	}
	s = s[:MaxPreview]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// checkLease validates a lease passed back to the store.
func checkLease(l Lease) error {
	var errs []error
	if l.RunID == "" {
		errs = append(errs, errors.New("lease run ID is empty"))
	}
	if l.Owner == "" {
		errs = append(errs, errors.New("lease owner is empty"))
	}
	if l.Token < 1 {
		errs = append(errs, fmt.Errorf("lease fencing token is %d", l.Token))
	}
	return invalid(errs...)
}

// checkLeaseFor validates a lease duration.
func checkLeaseFor(d time.Duration) error {
	if d < time.Second {
		return invalid(fmt.Errorf("lease duration %s is under a second", d))
	}
	return nil
}

// checkMessageQuery validates a message window.
func checkMessageQuery(q MessageQuery) error {
	if q.After < 0 || q.Before < 0 {
		return invalid(fmt.Errorf("message window (%d, %d) is negative", q.After, q.Before))
	}
	if q.Branch != nil && *q.Branch < 0 {
		return invalid(fmt.Errorf("message branch %d is negative", *q.Branch))
	}
	return checkListLimit(q.Limit)
}

// beforeOrMax maps an open Before (0) to the largest sequence.
func beforeOrMax(before int64) int64 {
	if before == 0 {
		return 1<<63 - 1
	}
	return before
}

// earliest is the earlier of two times, ignoring zero ones.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// closedError is ErrNotFound for a deleted run, ErrClosed for one in a
// terminal status, and nil for any other: why a write to the run was
// refused when it was not a lost lease.
func closedError(r Run) error {
	switch {
	case !r.DeletedAt.IsZero():
		return ErrNotFound
	case r.Status.Terminal():
		return ErrClosed
	}
	return nil
}
