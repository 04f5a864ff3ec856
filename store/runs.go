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
)

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
}

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
		if e.StartsTurn < 0 || (e.StartsTurn > 0 && e.EndsTurn) {
			return nil, invalid(fmt.Errorf("event %s: StartsTurn %d with EndsTurn %t", e.Type, e.StartsTurn, e.EndsTurn))
		}
		e.Payload = p
		e.Preview = cutPreview(e.Preview)
		out[i] = preparedEvent{NewEvent: e, message: isMessage(e.Type)}
	}
	return out, nil
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
	return checkListLimit(q.Limit)
}

// beforeOrMax maps an open Before (0) to the largest sequence.
func beforeOrMax(before int64) int64 {
	if before == 0 {
		return 1<<63 - 1
	}
	return before
}
