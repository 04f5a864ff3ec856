package assistant

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// Manual compaction: a person asks for a run to be continued in a new
// one. Its whole conversation is summarised (folding its latest snapshot)
// into a manual snapshot of the run; a child run opens with that summary
// (a message.summary event, and its own snapshot 1 covering it, so that
// the summary stays in its model context however long it grows) and names
// the run it continues; the run's log names the child, and the run is
// completed: it stays whole and readable.

// RunContinued is the payload of agent.run.continued.
type RunContinued struct {
	// RunID is the child; SnapshotVersion the snapshot of this run its
	// summary is.
	RunID           string `json:"runId"`
	SnapshotVersion int64  `json:"snapshotVersion"`
}

var (
	errTurnInProgress = httpx.Errorf(http.StatusConflict, "turn_in_progress",
		"The assistant is working on this session: wait until its turn ends (or stop it), then try again.")
	errNothingToCompact = httpx.Errorf(http.StatusConflict, "nothing_to_compact", "This session has no messages to summarise.")
)

// continuedTitle is the title of a child of a run titled title.
func continuedTitle(title string) string {
	t := "Continued: " + cmp.Or(title, "session")
	if utf8.RuneCountInString(t) > maxTitle {
		t = string([]rune(t)[:maxTitle-1]) + "…"
	}
	return t
}

// ContinueRun summarises owner's run runID and continues it in a child
// run, which it returns (created false: a retry with idempotencyKey found
// the child it made). The run must be between turns with nothing waiting
// (409 turn_in_progress) and hold messages (409 nothing_to_compact); a
// summary the model fails to write, or that is refused, is 502
// compaction_failed and writes nothing. The summary is a model request of
// sender's: past sender's daily token limit, only a retry is answered.
func (rt *Runtime) ContinueRun(ctx context.Context, owner string, sender Sender, runID, idempotencyKey string) (_ store.Run, created bool, _ error) {
	r, err := rt.Run(ctx, owner, runID)
	if err != nil {
		return store.Run{}, false, err
	}
	child := store.Run{ID: newRunID(), Owner: owner, Title: continuedTitle(r.Title), Metadata: r.Metadata,
		IdempotencyKey: cmp.Or(idempotencyKey, ownKey())}
	if idempotencyKey != "" {
		// A retry: the child made already, found before any model call.
		ids, err := rt.st.ChildRuns(ctx, r.ID)
		if err != nil {
			return store.Run{}, false, err
		}
		for _, id := range ids {
			if c, err := rt.st.GetRun(ctx, id); err == nil && c.IdempotencyKey == idempotencyKey {
				return c, false, nil
			}
		}
	}
	if err := checkSender(sender); err != nil {
		return store.Run{}, false, err
	}
	if err := rt.checkTokens(ctx, owner, sender, limitedRequest, nil); err != nil {
		return store.Run{}, false, err
	}
	if r.TurnSeq != 0 || !r.QueuedAt.IsZero() || (r.LeaseOwner != "" && r.LeaseExpiresAt.After(rt.o.Now())) {
		// Working: a turn is open or queued, or a replica holds the run
		// (a slice claimed it, and may be about to start a turn).
		return store.Run{}, false, errTurnInProgress
	}
	snap, err := rt.summarizeAll(ctx, r)
	if err != nil {
		return store.Run{}, false, err
	}
	child.ParentVersion = snap.Version
	first := store.NewEvent{Type: EventSummaryMessage, Preview: titleFrom(snap.Summary),
		Payload: mustJSON(SummaryMessage{Content: snap.Summary, FromRun: r.ID, FromVersion: snap.Version, ToSeq: snap.ToSeq})}
	note := store.NewEvent{Type: EventRunContinued, Payload: mustJSON(RunContinued{RunID: child.ID, SnapshotVersion: snap.Version})}
	var out store.Run
	err = rt.retryUnknown(ctx, child.ID, func() (err error) {
		out, created, err = rt.st.ContinueRun(ctx, store.ContinueRunParams{From: r.ID, Child: child, First: first, Note: note, Summary: &snap, MaxActive: rt.o.MaxActiveRuns,
			Withdrawal: rt.withdrawal(owner, continuedBy)})
		return err
	})
	switch {
	case errors.Is(err, store.ErrLimit):
		return store.Run{}, false, errTooManyActiveRuns
	case errors.Is(err, store.ErrConflict):
		return store.Run{}, false, errTurnInProgress
	case err != nil:
		return store.Run{}, false, err
	}
	return out, created || idempotencyKey == "", nil
}

// summarizeAll is a manual snapshot of r covering its whole conversation:
// its latest snapshot when that covers it already, else a new one that
// folds it.
func (rt *Runtime) summarizeAll(ctx context.Context, r store.Run) (store.ContextSnapshot, error) {
	for attempt := 0; ; attempt++ {
		last, err := rt.st.ListMessages(ctx, r.ID, store.MessageQuery{Limit: 1, Last: true})
		if err != nil {
			return store.ContextSnapshot{}, err
		}
		if len(last) == 0 {
			return store.ContextSnapshot{}, errNothingToCompact
		}
		var prev *store.ContextSnapshot
		switch s, err := rt.st.LatestSnapshot(ctx, r.ID); {
		case err == nil && s.ToSeq >= last[0].Seq:
			return s, nil
		case err == nil:
			prev = &s
		case !errors.Is(err, store.ErrNotFound):
			return store.ContextSnapshot{}, err
		}
		set, _ := compactSettingsOf(r.Metadata)
		snap, _, err := rt.compact(withUsageOwner(ctx, r.Owner), r.ID, prev, last[0].Seq, set.ChunkTokens, store.SnapshotManual)
		var f *summaryFailure
		switch {
		case errors.As(err, &f):
			rt.compactions.failure(f)
			return store.ContextSnapshot{}, httpx.Errorf(http.StatusBadGateway, "compaction_failed",
				"The session could not be summarised: "+f.Reason+". Nothing was changed; try again later.")
		case errors.Is(err, store.ErrConflict) && attempt == 0:
			rt.compactions.conflict.Add(1)
			continue // another snapshot came first: fold it
		case err != nil:
			return store.ContextSnapshot{}, err
		}
		rt.compactions.written.Add(1)
		return snap, nil
	}
}
