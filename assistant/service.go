package assistant

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// The API's errors beyond httpx's common ones.
var (
	errTooManyActiveRuns = httpx.Errorf(http.StatusTooManyRequests, "too_many_active_runs",
		"You have as many active sessions as you may. Complete one, or wait until one goes idle, then try again.")
	errRunClosed = httpx.Errorf(http.StatusConflict, "operator_run_closed",
		"This session is closed: it takes no more messages.")
	errRunNotFound = httpx.Errorf(http.StatusNotFound, "not_found", "There is no such session.")
	errKeyReused   = httpx.Errorf(http.StatusConflict, "idempotency_key_reused",
		"This Idempotency-Key was sent with another message: send a new key for a new message.")
)

// maxTitle is the most characters of a run's title.
const maxTitle = 200

// NewRun is what a run is opened with; every field is optional.
type NewRun struct {
	Title string
	// Message is the opening message.
	Message string
	// IdempotencyKey makes retries of the creation return the first run.
	IdempotencyKey string
	// Metadata is the run's settings (see RunMetadata): the text of a
	// JSON object.
	Metadata string
	// Attachments are the ids of the owner's attachments the opening
	// message sends (see PostMessageWith).
	Attachments []string
}

// CreateRun opens a run for owner, with an opening message when
// n.Message is not empty; n.IdempotencyKey, when not empty, makes retries
// return the first run. created is false for such a retry. Without a key
// the creation gets one of its own, so that a write whose outcome is
// unknown is tried again without opening a second run.
func (rt *Runtime) CreateRun(ctx context.Context, owner string, sender Sender, n NewRun) (_ store.Run, created bool, _ error) {
	title, message, idempotencyKey := n.Title, n.Message, n.IdempotencyKey
	if err := rt.checkTitle(title); err != nil {
		return store.Run{}, false, err
	}
	m, err := parseRunMetadata(n.Metadata)
	if err != nil {
		return store.Run{}, false, httpx.Errorf(http.StatusBadRequest, "invalid_metadata", "The metadata is not usable: "+err.Error()+".")
	}
	if m.Model != nil {
		if err := rt.checkModel(*m.Model); err != nil {
			return store.Run{}, false, err
		}
	}
	var first *store.NewEvent
	refs, err := rt.openingAttachments(ctx, owner, idempotencyKey, n.Attachments)
	if err != nil {
		return store.Run{}, false, err
	}
	if message != "" || len(refs) > 0 {
		e, err := rt.userMessage(message, sender, refs...)
		if err != nil {
			return store.Run{}, false, err
		}
		if err := rt.checkTokens(ctx, owner, sender, limitedRequest, rt.runKeyUsed(owner, idempotencyKey)); err != nil {
			return store.Run{}, false, err
		}
		first = &e
	}
	if title == "" && first != nil {
		title = titleFrom(cmp.Or(message, attachmentNames(refs)))
	}
	r := store.Run{ID: newRunID(), Owner: owner, Title: title, IdempotencyKey: cmp.Or(idempotencyKey, ownKey()), Metadata: n.Metadata}
	var out store.Run
	// Only an opening message queues the run.
	openCtx := ctx
	var span trace.Span
	if first != nil {
		openCtx, span = startEnqueue(ctx, r.ID)
		first.Trace = queuedTrace(openCtx)
	}
	err = rt.retryUnknown(ctx, r.ID, func() (err error) {
		out, created, err = rt.st.OpenRun(openCtx, r, rt.o.MaxActiveRuns, first)
		return err
	})
	if span != nil {
		endEnqueue(span, out.LastSeq, err)
	}
	switch {
	case errors.Is(err, store.ErrLimit):
		return store.Run{}, false, errTooManyActiveRuns
	case err != nil:
		return store.Run{}, false, err
	}
	if out.Owner != owner {
		return store.Run{}, false, errRunNotFound
	}
	rt.bindOpening(ctx, out.ID, owner, n.Attachments)
	// With the creation's own key, a run found by it is the one an
	// earlier attempt opened.
	return out, created || idempotencyKey == "", nil
}

// ownKey is an idempotency key for a write the client sent without one.
func ownKey() string { return "usher:" + strings.TrimPrefix(newRunID(), "run_") }

// writeAttempts is how many times a write whose outcome is unknown (the
// database failed to answer) is tried, with its idempotency key, before
// it fails.
const writeAttempts = 3

// retryUnknown runs write, which is idempotent, until it succeeds, fails
// for a reason that another try would not change, or has been tried
// writeAttempts times.
func (rt *Runtime) retryUnknown(ctx context.Context, runID string, write func() error) error {
	for attempt := 1; ; attempt++ {
		err := write()
		if err == nil || attempt == writeAttempts || ctx.Err() != nil ||
			errors.Is(err, store.ErrClosed) || errors.Is(err, store.ErrNotFound) ||
			errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrLimit) {
			return err
		}
		rt.log.Warn("assistant: a write failed; trying again with its idempotency key", "run", runID, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

func (rt *Runtime) checkTitle(title string) error {
	if !utf8.ValidString(title) || utf8.RuneCountInString(title) > maxTitle || strings.ContainsFunc(title, isControl) {
		return httpx.Errorf(http.StatusBadRequest, "invalid_title", "The title must be at most 200 characters of text without control characters.")
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// byteSize says how large n bytes are, as a person reads it: "900 bytes",
// "64 KiB", "68.4 KiB", "1.5 MiB".
func byteSize(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<10))) + " KiB"
	}
	return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<20))) + " MiB"
}

// trimZero drops a decimal ".0".
func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }

// userMessage validates a message and makes its event. A message that
// sends attachments may have no text.
func (rt *Runtime) userMessage(content string, sender Sender, attachments ...AttachmentRef) (store.NewEvent, error) {
	switch {
	case len(content) > rt.o.MaxMessageBytes:
		return store.NewEvent{}, httpx.Errorf(http.StatusRequestEntityTooLarge, "message_too_large",
			fmt.Sprintf("The message is %s; this server takes messages of up to %s. Shorten it, or attach the text as a file.",
				byteSize(len(content)), byteSize(rt.o.MaxMessageBytes)))
	case !utf8.ValidString(content) || strings.ContainsRune(content, 0):
		return store.NewEvent{}, httpx.Errorf(http.StatusBadRequest, "invalid_message", "The message must be text (UTF-8, without NUL).")
	case strings.TrimSpace(content) == "" && len(attachments) == 0:
		return store.NewEvent{}, httpx.Errorf(http.StatusBadRequest, "invalid_message", "The message is empty.")
	}
	if err := checkSender(sender); err != nil {
		return store.NewEvent{}, err
	}
	m := UserMessage{Content: content, Sender: senderOrNil(sender), Attachments: attachments}
	return store.NewEvent{Type: EventUserMessage, Payload: mustJSON(m), Preview: cmp.Or(plainText(content), attachmentNames(attachments))}, nil
}

// checkSender refuses a message of a sender the turn's broker tokens
// cannot carry (broker.CheckSubject): 403 too_many_groups for more groups
// than a token carries, 403 groups_not_carried for a tenant or group a
// token cannot hold. Every tool call of the turn would be refused, so the
// sender is told now, and why, rather than after the turn's retries; a
// turn of such a sender's message ends with the same words.
func checkSender(s Sender) *httpx.Error {
	switch {
	case len(s.Groups) > broker.MaxGroups:
		return httpx.Errorf(http.StatusForbidden, "too_many_groups", fmt.Sprintf(
			"Your account is in %d groups, more than the %d the assistant's tool calls can carry, so the assistant cannot act for you. "+
				"An administrator can have the identity provider send only the groups assigned to Usher.",
			len(s.Groups), broker.MaxGroups))
	case broker.CheckSubject(s.Tenant, s.Groups) != nil:
		return httpx.Errorf(http.StatusForbidden, "groups_not_carried", fmt.Sprintf(
			"Your account's tenant or one of its groups cannot be carried by the assistant's tool calls "+
				"(at most %d bytes of printable text each), so the assistant cannot act for you.", broker.MaxClaimLength))
	}
	return nil
}

// newRunID returns a random run id.
func newRunID() string {
	return "run_" + strings.ReplaceAll(uuid.Must(uuid.NewRandomFromReader(rand.Reader)).String(), "-", "")
}

// Run returns the owner's run; another owner's, or a deleted one, is not
// found.
func (rt *Runtime) Run(ctx context.Context, owner, id string) (store.Run, error) {
	r, err := rt.st.GetRun(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (r.Owner != owner || !r.DeletedAt.IsZero())) {
		return store.Run{}, errRunNotFound
	}
	return r, err
}

// PostMessage appends a user message to the owner's run and queues it for
// a turn. key, when not empty, is the client's idempotency key: when the
// run already holds a message posted with it, that message is returned,
// with created false, and nothing is stored; when that message is not
// content, the post fails with 409 idempotency_key_reused. Without a key
// the post gets one of its own, so that a write whose outcome is unknown
// is tried again without storing the message twice.
func (rt *Runtime) PostMessage(ctx context.Context, owner string, sender Sender, id, content, key string) (_ store.Event, _ store.Run, created bool, _ error) {
	return rt.PostMessageWith(ctx, owner, sender, id, content, key, nil)
}

// PostMessageWith is PostMessage of a message that sends the owner's
// attachments ids (uploaded, and not sent in another run): they are bound
// to the run before the message is stored, and referenced from it.
func (rt *Runtime) PostMessageWith(ctx context.Context, owner string, sender Sender, id, content, key string, attachments []string) (_ store.Event, _ store.Run, created bool, _ error) {
	if _, err := rt.Run(ctx, owner, id); err != nil {
		return store.Event{}, store.Run{}, false, err
	}
	if _, err := rt.userMessage(content, sender, make([]AttachmentRef, len(attachments))...); err != nil {
		return store.Event{}, store.Run{}, false, err
	}
	if err := rt.checkTokens(ctx, owner, sender, limitedRequest, rt.messageKeyUsed(id, key)); err != nil {
		return store.Event{}, store.Run{}, false, err
	}
	refs, err := rt.attachToRun(ctx, id, owner, attachments)
	if err != nil {
		return store.Event{}, store.Run{}, false, err
	}
	e, err := rt.userMessage(content, sender, refs...)
	if err != nil {
		return store.Event{}, store.Run{}, false, err
	}
	postKey := cmp.Or(key, ownKey())
	var ev store.Event
	var r store.Run
	postCtx, span := startEnqueue(ctx, id)
	e.Trace = queuedTrace(postCtx)
	err = rt.retryUnknown(postCtx, id, func() (err error) {
		ev, r, created, err = rt.st.PostMessageOnce(postCtx, id, e, postKey)
		return err
	})
	endEnqueue(span, ev.Seq, err)
	switch {
	case errors.Is(err, store.ErrClosed):
		return store.Event{}, store.Run{}, false, errRunClosed
	case errors.Is(err, store.ErrNotFound):
		return store.Event{}, store.Run{}, false, errRunNotFound
	case err != nil:
		return store.Event{}, store.Run{}, false, err
	case key == "":
		// The post's own key: an earlier attempt stored it.
		return ev, r, true, nil
	case !created:
		var stored UserMessage
		if err := json.Unmarshal(ev.Payload, &stored); err != nil || ev.Type != EventUserMessage || stored.Content != content {
			return store.Event{}, store.Run{}, false, errKeyReused
		}
	}
	return ev, r, created, nil
}

// Rename sets the title of the owner's run: at most 200 characters of
// text without control characters, not blank.
func (rt *Runtime) Rename(ctx context.Context, owner, id, title string) (store.Run, error) {
	title = strings.TrimSpace(title)
	if title == "" {
		return store.Run{}, httpx.Errorf(http.StatusBadRequest, "invalid_title", "The title is empty.")
	}
	if err := rt.checkTitle(title); err != nil {
		return store.Run{}, err
	}
	if _, err := rt.Run(ctx, owner, id); err != nil {
		return store.Run{}, err
	}
	r, err := rt.st.RenameRun(ctx, id, title)
	if errors.Is(err, store.ErrNotFound) {
		return store.Run{}, errRunNotFound
	}
	return r, err
}

// Close completes or cancels the owner's run.
func (rt *Runtime) Close(ctx context.Context, owner, id string, to store.RunStatus) (store.Run, error) {
	if _, err := rt.Run(ctx, owner, id); err != nil {
		return store.Run{}, err
	}
	r, err := rt.st.CloseRun(ctx, id, to, cancelledTurnEnd("The session was closed during the turn.", "The session was closed before this message's turn."),
		rt.withdrawal(owner, closedBy(to)))
	switch {
	case errors.Is(err, store.ErrClosed):
		return store.Run{}, errRunClosed
	case errors.Is(err, store.ErrNotFound):
		return store.Run{}, errRunNotFound
	case err == nil:
		// The store released the run's hold with it; a session held
		// here closes now, one held elsewhere at its holder's next
		// reap.
		rt.holder.forget(id)
	}
	return r, err
}

// Delete deletes the owner's run.
func (rt *Runtime) Delete(ctx context.Context, owner, id string) error {
	if _, err := rt.Run(ctx, owner, id); err != nil {
		return err
	}
	err := rt.st.DeleteRun(ctx, id, cancelledTurnEnd("The session was deleted during the turn.", "The session was deleted before this message's turn."),
		rt.withdrawal(owner, deletedBy))
	if errors.Is(err, store.ErrNotFound) {
		return errRunNotFound
	}
	if err == nil {
		rt.holder.forget(id)
	}
	return err
}

// cancelledTurnEnd ends the turns of a run closed: the open one, as why
// says, and those of the messages still waiting for a turn, which start
// and end at once, as waiting says. Each end names the message its turn
// answered, as every turn's end does.
func cancelledTurnEnd(why, waiting string) store.TurnEndFunc {
	return func(turnSeq int64, started bool) []store.NewEvent {
		var out []store.NewEvent
		if !started {
			why = waiting
			out = append(out, store.NewEvent{Type: EventTurnStart, Payload: mustJSON(TurnStart{MessageSeq: turnSeq}), StartsTurn: turnSeq})
		}
		return append(out, store.NewEvent{Type: EventTurnEnd, EndsTurn: true,
			Payload: mustJSON(TurnEnd{MessageSeq: turnSeq, Status: TurnCancelled, Error: why})})
	}
}

// ApprovalDecided requeues the run an approval belongs to, so that its
// runner retries (or gives up) the call that waited. It is what the
// approvals API calls after a decision; the sweep does it too, should this
// call be lost.
func (rt *Runtime) ApprovalDecided(ctx context.Context, runID string) {
	if runID == "" {
		return
	}
	if _, err := rt.st.RequeueRun(ctx, runID); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		rt.log.Error("assistant: requeueing a run after an approval decision failed", "run", runID, "err", err)
	}
}

// TurnOutcome is how a turn stands when a waiting client is answered.
type TurnOutcome struct {
	// Status is completed, failed, cancelled, awaiting_approval, or
	// running when the wait ran out first.
	Status string
	// End is the turn's end record, when it ended.
	End *TurnEnd
	// Messages are the turn's messages after the user's.
	Messages []store.Event
	Run      store.Run
}

// waitTurn waits up to d for the turn that answers the message seq to end
// or pause, as sub, a subscriber of the run's updates that joined before
// the message seq was posted, learns of it; known, when not nil, is the
// run as posting it left it, which spares reading it again first.
func (rt *Runtime) waitTurn(ctx context.Context, sub *runSub, owner, id string, seq int64, d time.Duration, known *store.Run) (TurnOutcome, error) {
	// Turns run on any replica: the end of their leases (which ends or
	// pauses a turn) arrives through the bus as a change of the run; a
	// slow poll covers a lost notification.
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(5 * time.Second)
	defer poll.Stop()
	for {
		var r store.Run
		if known != nil {
			r, known = *known, nil
		} else {
			var err error
			if r, err = rt.Run(ctx, owner, id); err != nil {
				return TurnOutcome{}, err
			}
		}
		out := TurnOutcome{Run: r, Status: "running"}
		switch {
		case r.HandledSeq >= seq || r.Status.Terminal():
			end, msgs, err := rt.turnResult(ctx, id, seq)
			if err != nil {
				return TurnOutcome{}, err
			}
			out.Messages = msgs
			if end != nil {
				out.End, out.Status = end, end.Status
			} else {
				out.Status = TurnCancelled
			}
			return out, nil
		case r.Status == store.RunAwaitingApproval && r.TurnSeq == seq:
			_, msgs, err := rt.turnResult(ctx, id, seq)
			if err != nil {
				return TurnOutcome{}, err
			}
			out.Status, out.Messages = "awaiting_approval", msgs
			return out, nil
		}
		select {
		case <-ctx.Done():
			return TurnOutcome{}, ctx.Err()
		case <-deadline.C:
			return out, nil
		case <-sub.status:
		case <-poll.C:
		}
	}
}

// turnResult reads the turn's end (nil if none) and its messages after the
// user's.
func (rt *Runtime) turnResult(ctx context.Context, id string, seq int64) (*TurnEnd, []store.Event, error) {
	var end *TurnEnd
	var msgs []store.Event
	later := false // a later user message was seen
	after := seq
	for {
		page, err := rt.st.ListEvents(ctx, id, after, 500)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range page {
			switch {
			case e.Type == EventUserMessage:
				// A later message, queued while this turn ran: its turn
				// comes after this one ends.
				later = true
			case isMessageEvent(e.Type):
				// Only this turn's own messages: an earlier turn's output
				// logged after this message is not its answer. A message
				// that names no turn belongs to the user message before it.
				var m struct {
					MessageSeq int64 `json:"messageSeq"`
				}
				if json.Unmarshal(e.Payload, &m) == nil && (m.MessageSeq == seq || (m.MessageSeq == 0 && !later)) {
					msgs = append(msgs, e)
				}
			case e.Type == EventTurnEnd:
				var te TurnEnd
				if err := json.Unmarshal(e.Payload, &te); err == nil && (te.MessageSeq == seq || te.MessageSeq == 0) {
					return &te, msgs, nil
				}
			}
		}
		if len(page) < 500 {
			return end, msgs, nil
		}
		after = page[len(page)-1].Seq
	}
}
