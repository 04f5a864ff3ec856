package assistant

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// Branches of a conversation (see store/branches.go). Editing one of the
// user's messages, or asking for the last reply again, starts a new branch
// that replaces that message: the branch sees the conversation before it,
// then its own message, which the ordinary turn machinery answers.
// Deleting a message starts a branch too, whose line is the active one
// without it (and what went with it), and which queues nothing. The
// line left behind stays stored and readable, and the run can switch back
// to it; the model context is built from the active branch's line only,
// for every read of a turn goes through store.ListMessages, which reads
// that line. Branches are made and switched only between turns.

// The branch API's errors.
var (
	errRunBusy = httpx.Errorf(http.StatusConflict, "run_busy",
		"The assistant is still working on this session (a turn is open, waits for an approval, or a message waits for its turn): try again once it has answered.")
	errBranchConflict = httpx.Errorf(http.StatusConflict, "branch_conflict",
		"The session changed meanwhile: reload it and try again.")
	errMessageNotFound = httpx.Errorf(http.StatusNotFound, "message_not_found",
		"There is no such message on the session's active branch.")
	errNotUserMessage = httpx.Errorf(http.StatusBadRequest, "not_a_user_message",
		"Only your own messages can be edited.")
	errNothingToRegenerate = httpx.Errorf(http.StatusConflict, "nothing_to_regenerate",
		"There is no message to answer again yet.")
	errBranchNotFound = httpx.Errorf(http.StatusNotFound, "branch_not_found",
		"There is no such branch in this session.")
	errNotDeletable = httpx.Errorf(http.StatusBadRequest, "message_not_deletable",
		"A tool result goes with the reply that called the tool: delete that reply.")
	errInvalidSeq = httpx.Errorf(http.StatusBadRequest, "invalid_seq",
		"The message's sequence must be a whole number from 1.")
)

// branchError maps the store's refusals of a branch change to the API's.
func branchError(err error) error {
	switch {
	case errors.Is(err, store.ErrBusy):
		return errRunBusy
	case errors.Is(err, store.ErrClosed):
		return errRunClosed
	case errors.Is(err, store.ErrNotFound):
		return errRunNotFound
	case errors.Is(err, store.ErrConflict):
		return errBranchConflict
	}
	return err
}

// EditMessage replaces the user message seq of the owner's run, on its
// active line, with content: a new branch, made active, that starts with
// the edited message, which is queued for its turn, with the attachments
// of the message it replaces.
func (rt *Runtime) EditMessage(ctx context.Context, owner string, sender Sender, id string, seq int64, content, key string) (store.Branch, store.Event, store.Run, error) {
	return rt.EditMessageWith(ctx, owner, sender, id, seq, content, key, nil)
}

// EditMessageWith is EditMessage whose edited message sends the
// attachments ids instead, when ids is not nil: any of the run's (those
// the message it replaces sent, kept) and the owner's uploaded ones not
// sent in another run (added, bound to the run before the edit is
// stored); one left out is removed from the edited message, and stays on
// the line it was sent on. An empty ids sends none.
func (rt *Runtime) EditMessageWith(ctx context.Context, owner string, sender Sender, id string, seq int64, content, key string, ids []string) (store.Branch, store.Event, store.Run, error) {
	if _, err := rt.Run(ctx, owner, id); err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	msgs, err := rt.st.ListMessages(ctx, id, store.MessageQuery{After: seq - 1, Before: seq + 1, Limit: 1})
	var refused error
	switch {
	case err != nil:
		return store.Branch{}, store.Event{}, store.Run{}, err
	case len(msgs) == 0:
		refused = errMessageNotFound
	case msgs[0].Type != EventUserMessage:
		refused = errNotUserMessage
	}
	// A retry with the key finds the message off the line the edit made
	// active: the store answers with that edit's branch, or refuses.
	if refused != nil && key == "" {
		return store.Branch{}, store.Event{}, store.Run{}, refused
	}
	// Without ids the edited message sends the attachments the message it
	// replaces sent: an edit changes the text.
	var orig UserMessage
	if refused == nil {
		if err := json.Unmarshal(msgs[0].Payload, &orig); err != nil {
			return store.Branch{}, store.Event{}, store.Run{}, err
		}
	}
	refs := orig.Attachments
	if ids != nil {
		refs = make([]AttachmentRef, len(ids))
	}
	if _, err := rt.userMessage(content, sender, refs...); err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	if err := rt.checkTokens(ctx, owner, sender, limitedRequest, rt.messageKeyUsed(id, key)); err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	if ids != nil {
		if refs, err = rt.attachToRun(ctx, id, owner, ids); err != nil {
			return store.Branch{}, store.Event{}, store.Run{}, err
		}
	}
	e, err := rt.userMessage(content, sender, refs...)
	if err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	e.Payload = mustJSON(UserMessage{Content: content, Sender: senderOrNil(sender), Edits: seq, Attachments: refs})
	b, ev, r, err := rt.fork(ctx, id, store.Fork{At: seq, Kind: store.BranchEdit, CreatedBy: owner, Message: e, Key: key})
	if err != nil && refused != nil {
		return store.Branch{}, store.Event{}, store.Run{}, refused
	}
	return b, ev, r, err
}

// DeleteMessage deletes the message seq of the owner's run, on its active
// line: a new branch, made active, whose line is the active line without
// it (and, for a user message, without its answer up to the next user
// message; for a reply, without the tool results that follow it). The
// line left stays, and SwitchBranch goes back to it.
func (rt *Runtime) DeleteMessage(ctx context.Context, owner, id string, seq int64, key string) (store.Branch, store.Event, store.Run, error) {
	if _, err := rt.Run(ctx, owner, id); err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	msgs, err := rt.st.ListMessages(ctx, id, store.MessageQuery{After: seq - 1, Before: seq + 1, Limit: 1})
	var refused error
	switch {
	case err != nil:
		return store.Branch{}, store.Event{}, store.Run{}, err
	case len(msgs) == 0:
		refused = errMessageNotFound
	case msgs[0].Type == EventToolResult:
		refused = errNotDeletable
	}
	// A retry with the key finds the message off the line the deletion
	// made active: the store answers with that deletion's branch.
	if refused != nil && key == "" {
		return store.Branch{}, store.Event{}, store.Run{}, refused
	}
	b, ev, r, err := rt.st.DeleteMessage(ctx, id, store.Deletion{At: seq, CreatedBy: owner, Key: key})
	switch {
	case err != nil && refused != nil:
		return store.Branch{}, store.Event{}, store.Run{}, refused
	case errors.Is(err, store.ErrInvalid):
		return store.Branch{}, store.Event{}, store.Run{}, errNotDeletable
	case err != nil:
		return store.Branch{}, store.Event{}, store.Run{}, branchError(err)
	}
	return b, ev, r, nil
}

// Regenerate asks again for the reply to the last user message of the
// owner's run, on its active line: a new branch, made active, that starts
// with the same message again (Regenerates names it), queued for its
// turn.
func (rt *Runtime) Regenerate(ctx context.Context, owner string, sender Sender, id, key string) (store.Branch, store.Event, store.Run, error) {
	if _, err := rt.Run(ctx, owner, id); err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	last, err := rt.lastUserMessage(ctx, id)
	if err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	var m UserMessage
	if err := json.Unmarshal(last.Payload, &m); err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	e, err := rt.userMessage(m.Content, sender, m.Attachments...)
	if err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	if err := rt.checkTokens(ctx, owner, sender, limitedRequest, rt.messageKeyUsed(id, key)); err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, err
	}
	e.Payload = mustJSON(UserMessage{Content: m.Content, Sender: senderOrNil(sender), Regenerates: last.Seq, Attachments: m.Attachments})
	return rt.fork(ctx, id, store.Fork{At: last.Seq, Kind: store.BranchRegenerate, CreatedBy: owner, Message: e, Key: key})
}

// fork makes the branch f of the run id, whose message queues the run.
func (rt *Runtime) fork(ctx context.Context, id string, f store.Fork) (store.Branch, store.Event, store.Run, error) {
	ctx, span := startEnqueue(ctx, id)
	f.Message.Trace = queuedTrace(ctx)
	b, ev, r, err := rt.st.ForkRun(ctx, id, f)
	endEnqueue(span, ev.Seq, err)
	if err != nil {
		return store.Branch{}, store.Event{}, store.Run{}, branchError(err)
	}
	return b, ev, r, nil
}

// senderOrNil is the Sender a message records: none when it says nothing.
func senderOrNil(s Sender) *Sender {
	if s.Tenant == "" && len(s.Groups) == 0 && len(s.Roles) == 0 {
		return nil
	}
	return &s
}

// lastUserMessage finds the last user message of the run's active line.
func (rt *Runtime) lastUserMessage(ctx context.Context, id string) (store.Event, error) {
	var before int64
	for {
		page, err := rt.st.ListMessages(ctx, id, store.MessageQuery{Before: before, Limit: 50, Last: true})
		if err != nil {
			return store.Event{}, err
		}
		if len(page) == 0 {
			return store.Event{}, errNothingToRegenerate
		}
		for i := len(page) - 1; i >= 0; i-- {
			if page[i].Type == EventUserMessage {
				return page[i], nil
			}
		}
		before = page[0].Seq
	}
}

// SwitchBranch makes branch the active branch of the owner's run: the
// conversation, and the model context, go on from its line.
func (rt *Runtime) SwitchBranch(ctx context.Context, owner, id string, branch int64) (store.Run, error) {
	run, err := rt.Run(ctx, owner, id)
	if err != nil {
		return store.Run{}, err
	}
	if branch < 0 || branch > run.Branches {
		return store.Run{}, errBranchNotFound
	}
	r, err := rt.st.SwitchBranch(ctx, id, branch)
	if err != nil {
		return store.Run{}, branchError(err)
	}
	return r, nil
}

// BranchesView is a run's branches as the API shows them.
type BranchesView struct {
	ActiveBranch int64        `json:"activeBranch"`
	Branches     []BranchView `json:"branches"`
	// Forks are the messages that have alternatives, by parent and
	// sequence: what the UI's "< 2/3 >" switches between.
	Forks []ForkView `json:"forks"`
}

// BranchView is one branch: 0 is the original line.
type BranchView struct {
	ID int64 `json:"id"`
	// Parent is the branch forked from (null for the original line);
	// ForkSeq the parent's message the branch replaces, MessageSeq the
	// branch's own first message (both 0 for the original line).
	Parent     *int64    `json:"parent"`
	ForkSeq    int64     `json:"forkSeq"`
	MessageSeq int64     `json:"messageSeq"`
	Kind       string    `json:"kind"` // original, edit, regenerate or delete
	CreatedAt  time.Time `json:"createdAt"`
	Active     bool      `json:"active"`
	// Line is what the branch reads, in order: the events of each
	// segment's branch before its untilSeq (absent on the last segment,
	// the branch's own).
	Line []SegmentView `json:"line"`
}

// SegmentView is one segment of a branch's line. FromSeq, on a segment
// that starts right after a deleted message, is where it starts.
type SegmentView struct {
	Branch   int64  `json:"branch"`
	FromSeq  int64  `json:"fromSeq,omitempty"`
	UntilSeq *int64 `json:"untilSeq,omitempty"`
}

// ForkView is a message and its alternatives: the parent's message at
// forkSeq, then each branch that replaced it, in the order they were
// made.
type ForkView struct {
	Parent       int64             `json:"parent"`
	ForkSeq      int64             `json:"forkSeq"`
	Alternatives []AlternativeView `json:"alternatives"`
}

// AlternativeView is one alternative of a message: the message
// messageSeq of branch. Kind is "original" for the parent's message (the
// one the others replaced), else how the alternative's branch began
// (edit or regenerate). SwitchTo is the branch to make active to show it:
// the newest branch whose line holds that message (the alternative's own
// branch, or a later one forked from it).
type AlternativeView struct {
	Branch     int64  `json:"branch"`
	MessageSeq int64  `json:"messageSeq"`
	Kind       string `json:"kind"`
	SwitchTo   int64  `json:"switchTo"`
	Active     bool   `json:"active"`
}

// Branches returns the branches of the owner's run.
func (rt *Runtime) Branches(ctx context.Context, owner, id string) (BranchesView, error) {
	run, err := rt.Run(ctx, owner, id)
	if err != nil {
		return BranchesView{}, err
	}
	var stored []store.Branch
	if run.Branches > 0 {
		if stored, err = rt.st.ListBranches(ctx, id); err != nil {
			return BranchesView{}, err
		}
	}
	return viewBranches(run, stored), nil
}

// viewBranches makes the view of the run's branches: the original line,
// then stored, with the forks they make.
func viewBranches(run store.Run, stored []store.Branch) BranchesView {
	all := append([]store.Branch{{RunID: run.ID, Line: []store.LineSegment{{Branch: 0, Until: store.MaxSeq}}}}, stored...)
	v := BranchesView{ActiveBranch: run.ActiveBranch, Branches: make([]BranchView, len(all)), Forks: []ForkView{}}
	active := all[0].Line
	for _, b := range all {
		if b.ID == run.ActiveBranch {
			active = b.Line
		}
	}
	// switchTo: the newest branch whose line holds the message seq of
	// branch b.
	switchTo := func(b, seq int64) int64 {
		for i := len(all) - 1; i >= 0; i-- {
			if lineHolds(all[i].Line, b, seq) {
				return all[i].ID
			}
		}
		return b
	}
	alternative := func(b, seq int64, kind string) AlternativeView {
		return AlternativeView{Branch: b, MessageSeq: seq, Kind: kind, SwitchTo: switchTo(b, seq), Active: lineHolds(active, b, seq)}
	}
	forks := map[[2]int64]int{} // (parent, fork) → index in v.Forks
	for i, b := range all {
		bv := viewBranch(b, run.ActiveBranch)
		if i == 0 {
			bv.Kind, bv.CreatedAt = "original", run.CreatedAt
		} else {
			key := [2]int64{b.Parent, b.ForkSeq}
			at, ok := forks[key]
			if !ok {
				at = len(v.Forks)
				forks[key] = at
				v.Forks = append(v.Forks, ForkView{Parent: b.Parent, ForkSeq: b.ForkSeq,
					Alternatives: []AlternativeView{alternative(b.Parent, b.ForkSeq, "original")}})
			}
			v.Forks[at].Alternatives = append(v.Forks[at].Alternatives, alternative(b.ID, b.MessageSeq, string(b.Kind)))
		}
		v.Branches[i] = bv
	}
	slices.SortFunc(v.Forks, func(a, b ForkView) int {
		return cmp.Or(cmp.Compare(a.ForkSeq, b.ForkSeq), cmp.Compare(a.Parent, b.Parent))
	})
	return v
}

// lineHolds reports whether the line holds the event seq of branch b.
func lineHolds(line []store.LineSegment, b, seq int64) bool {
	for _, s := range line {
		if s.Branch == b && s.From <= seq && seq < s.Until {
			return true
		}
	}
	return false
}

// gapBetween reports whether messages of the run's active line lie
// between the run view's first and last windows. A run that never
// branched counts them: its message count is its line's. A branched
// run's count is the whole log's, so it looks.
func (rt *Runtime) gapBetween(ctx context.Context, run store.Run, first, last []EventView, firstHasMore bool) (bool, error) {
	if !firstHasMore || len(first) == 0 || len(last) == 0 || last[0].Seq <= first[len(first)-1].Seq {
		return false, nil
	}
	if run.Branches == 0 {
		return run.MessageCount > len(first)+len(last), nil
	}
	between, err := rt.st.ListMessages(ctx, run.ID, store.MessageQuery{After: first[len(first)-1].Seq, Before: last[0].Seq, Limit: 1, Branch: &run.ActiveBranch})
	return len(between) > 0, err
}

// branchCreated is the answer to an edit or a regenerate: the branch, and
// its message queued for its turn.
func branchCreated(w http.ResponseWriter, b store.Branch, ev store.Event, run store.Run) {
	httpx.WriteJSON(w, http.StatusAccepted, map[string]any{"runId": run.ID, "seq": ev.Seq, "status": "queued",
		"branch": viewBranch(b, run.ActiveBranch), "message": viewEvent(ev), "run": viewRun(run)})
}

// viewBranch is the view of the stored branch b of a run whose active
// branch is active.
func viewBranch(b store.Branch, active int64) BranchView {
	v := BranchView{ID: b.ID, ForkSeq: b.ForkSeq, MessageSeq: b.MessageSeq, Kind: string(b.Kind),
		CreatedAt: b.CreatedAt, Active: b.ID == active}
	if b.ID != 0 {
		v.Parent = &b.Parent
	}
	for _, s := range b.Line {
		sv := SegmentView{Branch: s.Branch, FromSeq: s.From}
		if s.Until != store.MaxSeq {
			sv.UntilSeq = &s.Until
		}
		v.Line = append(v.Line, sv)
	}
	return v
}

func (rt *Runtime) handleEdit(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq < 1 || seq > 1<<53 {
		rt.fail(w, r, errInvalidSeq)
		return
	}
	content, ids, err := decodeContent(r)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	b, ev, run, err := rt.EditMessageWith(r.Context(), owner, senderOf(r), r.PathValue("id"), seq, content, key, ids)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	branchCreated(w, b, ev, run)
}

func (rt *Runtime) handleDeleteMessage(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq < 1 || seq > 1<<53 {
		rt.fail(w, r, errInvalidSeq)
		return
	}
	key, ok := rt.emptyBodyAndKey(w, r)
	if !ok {
		return
	}
	b, ev, run, err := rt.DeleteMessage(r.Context(), owner, r.PathValue("id"), seq, key)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"runId": run.ID, "branch": viewBranch(b, run.ActiveBranch),
		"event": viewEvent(ev), "run": viewRun(run)})
}

func (rt *Runtime) handleRegenerate(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	key, ok := rt.emptyBodyAndKey(w, r)
	if !ok {
		return
	}
	b, ev, run, err := rt.Regenerate(r.Context(), owner, senderOf(r), r.PathValue("id"), key)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	branchCreated(w, b, ev, run)
}

func (rt *Runtime) handleBranches(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	v, err := rt.Branches(r.Context(), owner, r.PathValue("id"))
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

func (rt *Runtime) handleSwitchBranch(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	var body struct {
		Branch *int64 `json:"branch"`
	}
	if err := decode(r, &body); err != nil {
		rt.fail(w, r, err)
		return
	}
	if body.Branch == nil {
		rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_branch", "The body needs a branch field."))
		return
	}
	run, err := rt.SwitchBranch(r.Context(), owner, r.PathValue("id"), *body.Branch)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
}
