package assistant

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// Stopping a turn (POST …/stop): the person ends the run's current turn.
// Its end (status stopped) is recorded and the run's lease fenced off in
// one transaction (store.StopTurn); the process working the turn sees the
// run change and stops at once: its model step is cancelled, a tool call
// under way is cancelled on the caller's side and its execution is
// recorded as ever (an outcome, or outcome_unknown), and it writes
// nothing more. The run's open approvals are withdrawn in the same
// transaction: none can be decided or used after. The run takes messages
// as before. Completing, cancelling or deleting a run (and continuing it,
// which completes it, or failing it at its budget) withdraws its open
// approvals the same way, each with its own reason.

var errNothingToStop = httpx.Errorf(http.StatusConflict, "nothing_to_stop", "Nothing is running in this session.")

// stoppedBy is the text of a stopped turn's end.
const stoppedBy = "You stopped this turn."

// StopTurn stops the owner's run's current turn (or the turn of a message
// still waiting for one) and returns the run.
func (rt *Runtime) StopTurn(ctx context.Context, owner, id string) (store.Run, error) {
	if _, err := rt.Run(ctx, owner, id); err != nil {
		return store.Run{}, err
	}
	r, err := rt.st.StopTurn(ctx, id, func(turnSeq int64, started bool) []store.NewEvent {
		var out []store.NewEvent
		if !started {
			out = append(out, store.NewEvent{Type: EventTurnStart, Payload: mustJSON(TurnStart{MessageSeq: turnSeq}), StartsTurn: turnSeq})
		}
		return append(out, store.NewEvent{Type: EventTurnEnd, EndsTurn: true,
			Payload: mustJSON(TurnEnd{MessageSeq: turnSeq, Status: TurnStopped, Error: stoppedBy})})
	}, rt.withdrawal(owner, stoppedBy))
	switch {
	case errors.Is(err, store.ErrNothingToStop):
		return store.Run{}, errNothingToStop
	case errors.Is(err, store.ErrClosed):
		return store.Run{}, errRunClosed
	case errors.Is(err, store.ErrNotFound):
		return store.Run{}, errRunNotFound
	}
	return r, err
}

// handleStop stops the run's current turn. No body is read.
func (rt *Runtime) handleStop(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	run, err := rt.StopTurn(r.Context(), owner, r.PathValue("id"))
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
}

// withdrawal is how a stop, a close or a deletion of owner's run
// withdraws its open approvals, for reason: nothing they asked for runs
// any more. Each withdrawal is recorded as a decision, withdrawn, by the
// run's owner, whose stop or close it was.
func (rt *Runtime) withdrawal(owner, reason string) store.Withdrawal {
	w := store.Withdrawal{Reason: reason}
	if rt.o.Audit == nil {
		return w
	}
	w.Audit = func(a store.Approval) (func(store.AuditHead) (store.AuditRecord, error), error) {
		b := a.Binding
		details, err := json.Marshal(map[string]any{"requested_by": b.Principal, "reason": reason})
		if err != nil {
			return nil, err
		}
		return rt.o.Audit.Builder(audit.Entry{
			Kind: audit.KindApprovalDecided, At: rt.o.Now(),
			Principal: owner, ClientID: b.ClientID, Tool: b.Tool,
			DefinitionHash: b.DefinitionHash, ArgumentsHash: b.ArgumentsHash,
			Decision: string(store.ApprovalWithdrawn), PolicyIDs: a.PolicyIDs, PolicyHash: b.PolicyHash,
			ApprovalID: a.ID, RunID: b.RunID, Details: details,
		})
	}
	return w
}

// The reasons of the approvals a deletion and a continuation withdraw.
const (
	deletedBy   = "You deleted this session."
	continuedBy = "You continued this session in a new one."
)

// closedBy is the reason of the approvals a close to the status to
// withdraws.
func closedBy(to store.RunStatus) string {
	if to == store.RunCompleted {
		return "You completed this session."
	}
	return "You cancelled this session."
}
