package assistant

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// API limits.
const (
	maxWait          = 120 * time.Second
	defaultTake      = 50
	maxTake          = 200
	defaultPageBytes = 256 << 10
	maxPageBytes     = 1 << 20
	maxEventsPage    = 500
	// The run view's window: the first and last messages, each bounded.
	firstWindow, firstWindowBytes = 20, 128 << 10
	lastWindow, lastWindowBytes   = 100, 384 << 10
)

// Handler returns the Assistant API, to mount at /api/assistant/. Every
// route needs an authenticated principal in the request context (see
// identity.Verifier.Middleware); a user sees only their own runs.
func (rt *Runtime) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/assistant/runs", rt.handleCreate)
	mux.HandleFunc("GET /api/assistant/runs", rt.handleList)
	mux.HandleFunc("GET /api/assistant/search", rt.handleSearch)
	mux.HandleFunc("GET /api/assistant/models", rt.handleModels)
	mux.HandleFunc("GET /api/assistant/usage", rt.handleUsage)
	mux.HandleFunc("GET /api/assistant/runs/{id}", rt.handleGet)
	mux.HandleFunc("DELETE /api/assistant/runs/{id}", rt.handleDelete)
	mux.HandleFunc("PATCH /api/assistant/runs/{id}", rt.handleRename)
	mux.HandleFunc("POST /api/assistant/runs/{id}/messages", rt.handlePost)
	mux.HandleFunc("GET /api/assistant/runs/{id}/messages", rt.handleMessages)
	mux.HandleFunc("GET /api/assistant/runs/{id}/events", rt.handleEvents)
	mux.HandleFunc("GET /api/assistant/runs/{id}/steps", rt.handleSteps)
	mux.HandleFunc("GET /api/assistant/runs/{id}/events/stream", rt.handleRunStream)
	mux.HandleFunc("GET /api/assistant/runs/{id}/events/ws", rt.handleRunWebSocket)
	mux.HandleFunc("GET /api/assistant/updates/stream", rt.handleFeed)
	mux.HandleFunc("POST /api/assistant/runs/{id}/complete", rt.handleClose(store.RunCompleted))
	mux.HandleFunc("POST /api/assistant/runs/{id}/cancel", rt.handleClose(store.RunCancelled))
	mux.HandleFunc("POST /api/assistant/runs/{id}/compact", rt.handleCompact)
	mux.HandleFunc("POST /api/assistant/runs/{id}/stop", rt.handleStop)
	mux.HandleFunc("POST /api/assistant/runs/{id}/messages/{seq}/edit", rt.handleEdit)
	mux.HandleFunc("DELETE /api/assistant/runs/{id}/messages/{seq}", rt.handleDeleteMessage)
	mux.HandleFunc("POST /api/assistant/runs/{id}/regenerate", rt.handleRegenerate)
	mux.HandleFunc("GET /api/assistant/runs/{id}/branches", rt.handleBranches)
	mux.HandleFunc("PUT /api/assistant/runs/{id}/branch", rt.handleSwitchBranch)
	mux.HandleFunc("POST /api/assistant/attachments", rt.handleUpload)
	mux.HandleFunc("GET /api/assistant/attachments/{id}", rt.handleDownload)
	mux.HandleFunc("POST /api/assistant/runs/{id}/park", rt.handlePark)
	mux.HandleFunc("PUT /api/assistant/runs/{id}/pin", rt.handlePin(true))
	mux.HandleFunc("DELETE /api/assistant/runs/{id}/pin", rt.handlePin(false))
	mux.HandleFunc("GET /api/assistant/settings", rt.handleGetSettings)
	mux.HandleFunc("PUT /api/assistant/settings", rt.handlePutSettings)
	mux.HandleFunc("/api/assistant/", func(w http.ResponseWriter, r *http.Request) {
		// A path that exists with other methods is 405, with Allow.
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/api/assistant/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			httpx.WriteError(w, r, rt.log, httpx.ErrMethodNotAllowed)
			return
		}
		httpx.WriteError(w, r, rt.log, httpx.ErrNotFound)
	})
	// Bodies: a message of MaxMessageBytes, JSON-escaped, and some room;
	// an upload, an attachment.
	return rt.withUploadLimit(httpx.LimitBody(int64(rt.o.MaxMessageBytes)*6+4096, mux), mux)
}

// principal returns the caller's principal id.
func principal(r *http.Request) (string, bool) {
	p, ok := identity.FromContext(r.Context())
	if !ok {
		return "", false
	}
	return p.ID(), true
}

// senderOf is the caller's identity beyond its id, for the turn's tokens.
func senderOf(r *http.Request) Sender {
	p, _ := identity.FromContext(r.Context())
	return Sender{Tenant: p.Tenant, Groups: p.Groups, Roles: p.Roles}
}

// ownRun answers for the run the path names, which must be the caller's:
// it writes the error and reports false when there is none.
func (rt *Runtime) ownRun(w http.ResponseWriter, r *http.Request) (store.Run, bool) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return store.Run{}, false
	}
	run, err := rt.Run(r.Context(), owner, r.PathValue("id"))
	if err != nil {
		rt.fail(w, r, err)
		return store.Run{}, false
	}
	return run, true
}

var errUnauthenticated = httpx.Errorf(http.StatusUnauthorized, "unauthenticated", "Sign in first.")

// decode reads a JSON object body into v, refusing unknown fields and
// trailing data.
func decode(r *http.Request, v any) error { return decodeBody(r, v, false) }

// decodeOptional is decode for a request whose body may be left out: an
// empty body, whether it says so with Content-Length: 0 or is sent chunked
// with no bytes, leaves v as it is.
func decodeOptional(r *http.Request, v any) error { return decodeBody(r, v, true) }

// decodeBody is decode, and decodeOptional when optional.
func decodeBody(r *http.Request, v any, optional bool) error {
	body := io.Reader(r.Body)
	if optional {
		if r.ContentLength == 0 {
			return nil
		}
		b := bufio.NewReader(r.Body)
		if _, err := b.Peek(1); errors.Is(err, io.EOF) {
			return nil
		}
		body = b
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return httpx.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "Send the body as application/json.")
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return httpx.ErrBodyTooLarge
		}
		return httpx.Errorf(http.StatusBadRequest, "invalid_json", "The body must be one JSON object with the documented fields.")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return httpx.Errorf(http.StatusBadRequest, "invalid_json", "The body must be one JSON object with the documented fields.")
	}
	return nil
}

// decodeContent reads a message body, {"content", "attachments"?}: a
// message edited. attachments is nil when the body has none, not nil (if
// empty) when it has the field.
func decodeContent(r *http.Request) (content string, attachments []string, _ error) {
	var body struct {
		Content     *string   `json:"content"`
		Attachments *[]string `json:"attachments"`
	}
	if err := decode(r, &body); err != nil {
		return "", nil, err
	}
	if body.Content == nil {
		return "", nil, httpx.Errorf(http.StatusBadRequest, "invalid_message", "The body needs a content field.")
	}
	if body.Attachments != nil {
		attachments = append([]string{}, *body.Attachments...)
	}
	return *body.Content, attachments, nil
}

// emptyBodyAndKey reads the request of an action that takes no body (an
// empty one, or none) and an optional Idempotency-Key, and returns the
// key; on a bad body or key it answers the error and returns false.
func (rt *Runtime) emptyBodyAndKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	var body struct{}
	if err := decodeOptional(r, &body); err != nil {
		rt.fail(w, r, err)
		return "", false
	}
	key, err := idempotencyKey(r)
	if err != nil {
		rt.fail(w, r, err)
		return "", false
	}
	return key, true
}

// idempotencyKey reads the request's Idempotency-Key header ("" for none).
func idempotencyKey(r *http.Request) (string, error) {
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 200 || strings.ContainsFunc(key, isControl) {
		return "", httpx.Errorf(http.StatusBadRequest, "invalid_idempotency_key", "The Idempotency-Key header must be at most 200 bytes of printable text.")
	}
	return key, nil
}

// RunView is a run as the API shows it.
type RunView struct {
	ID           string     `json:"runId"`
	Title        string     `json:"title"`
	Status       string     `json:"status"`
	Preview      string     `json:"preview"`
	MessageCount int        `json:"messageCount"`
	LastSeq      int64      `json:"lastSeq"`
	Working      bool       `json:"working"`
	CreatedAt    time.Time  `json:"createdAt"`
	UpdatedAt    time.Time  `json:"updatedAt"`
	CompletedAt  *time.Time `json:"completedAt,omitempty"`
	// Context is the size of the model context of the run's latest model
	// step; absent until a turn recorded one.
	Context *ContextView `json:"context,omitempty"`
	// ActiveBranch is the branch the conversation goes on in (0: the
	// original line), Branches how many branches the run has beyond it.
	ActiveBranch int64 `json:"activeBranch"`
	Branches     int64 `json:"branches"`
	// Metadata is the run's settings, as it was created with them.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// ContinuedFrom names the run this one continues (manual compaction).
	ContinuedFrom *ContinuedFrom `json:"continuedFrom,omitempty"`
	// Pinned: the caller pinned the run to the top of their list (in
	// the list and the pin routes' answers).
	Pinned bool `json:"pinned,omitempty"`
}

// ContinuedFrom names the run a run continues and the version of its
// context snapshot the run's history starts from.
type ContinuedFrom struct {
	RunID           string `json:"runId"`
	SnapshotVersion int64  `json:"snapshotVersion"`
}

func viewRun(r store.Run) RunView {
	v := RunView{ID: r.ID, Title: r.Title, Status: string(r.Status), Preview: r.Preview, MessageCount: r.MessageCount,
		LastSeq: r.LastSeq, Working: r.TurnSeq != 0 || !r.QueuedAt.IsZero() || r.LeaseOwner != "",
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Context: viewContext(r.Context),
		ActiveBranch: r.ActiveBranch, Branches: r.Branches}
	if !r.CompletedAt.IsZero() {
		v.CompletedAt = &r.CompletedAt
	}
	if r.Metadata != "" {
		v.Metadata = json.RawMessage(r.Metadata)
	}
	if r.ParentRunID != "" {
		v.ContinuedFrom = &ContinuedFrom{RunID: r.ParentRunID, SnapshotVersion: r.ParentVersion}
	}
	return v
}

// RunLimits is how many of their runs a user has active, and may.
type RunLimits struct {
	// ActiveRuns counts the runs InProgress or AwaitingApproval;
	// MaxActiveRuns is how many there may be (a new one is refused, 429
	// too_many_active_runs, when they are as many).
	ActiveRuns    int `json:"activeRuns"`
	MaxActiveRuns int `json:"maxActiveRuns"`
	// MaxAttachmentBytes is the largest file that may be attached
	// (assistant.attachments_max_bytes): the page refuses a larger one
	// before uploading it.
	MaxAttachmentBytes int64 `json:"maxAttachmentBytes"`
	// DeleteInactiveAfter and PurgeDeletedAfter, in seconds, are the
	// retention of runs (assistant.delete_inactive_after,
	// assistant.purge_deleted_after); absent: never.
	DeleteInactiveAfter int64 `json:"deleteInactiveAfterSeconds,omitempty"`
	PurgeDeletedAfter   int64 `json:"purgeDeletedAfterSeconds,omitempty"`
}

// SnapshotView is a run's context snapshot as the API shows it.
type SnapshotView struct {
	Version   int64     `json:"version"`
	FromSeq   int64     `json:"fromSeq"`
	ToSeq     int64     `json:"toSeq"`
	Summary   string    `json:"summary"`
	Tokens    int64     `json:"tokens"`
	Kind      string    `json:"kind"`
	Model     string    `json:"model,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// handleRename sets the run's title (the body: a RenameRun).
func (rt *Runtime) handleRename(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	var body struct {
		Title *string `json:"title"`
		Model *string `json:"model"`
	}
	if err := decode(r, &body); err != nil {
		rt.fail(w, r, err)
		return
	}
	if body.Title == nil && body.Model == nil {
		rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_title", "The body needs a title field, a model field, or both."))
		return
	}
	// The model is checked before anything is written.
	if body.Model != nil {
		if err := rt.checkModel(*body.Model); err != nil {
			rt.fail(w, r, err)
			return
		}
	}
	var run store.Run
	var err error
	if body.Title != nil {
		if run, err = rt.Rename(r.Context(), owner, r.PathValue("id"), *body.Title); err != nil {
			rt.fail(w, r, err)
			return
		}
	}
	if body.Model != nil {
		if run, err = rt.SetModel(r.Context(), owner, r.PathValue("id"), *body.Model); err != nil {
			rt.fail(w, r, err)
			return
		}
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
}

// handleCompact continues the run in a child run that starts from a
// summary of it (manual compaction).
func (rt *Runtime) handleCompact(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	key, ok := rt.emptyBodyAndKey(w, r)
	if !ok {
		return
	}
	child, created, err := rt.ContinueRun(r.Context(), owner, senderOf(r), r.PathValue("id"), key)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/api/assistant/runs/"+child.ID)
	httpx.WriteJSON(w, status, viewRun(child))
}

// EventView is an event (a message or a turn record) as the API shows it.
type EventView struct {
	Seq       int64           `json:"seq"`
	Type      string          `json:"type"`
	CreatedAt time.Time       `json:"createdAt"`
	Data      json.RawMessage `json:"data"`
	// Branch is the branch the event was appended on (0: the original
	// line; see branches.go).
	Branch int64 `json:"branch"`
}

func viewEvent(e store.Event) EventView {
	return EventView{Seq: e.Seq, Type: e.Type, CreatedAt: e.CreatedAt, Data: e.Payload, Branch: e.Branch}
}

func viewEvents(events []store.Event) []EventView {
	out := make([]EventView, len(events))
	for i, e := range events {
		out[i] = viewEvent(e)
	}
	return out
}

func (rt *Runtime) fail(w http.ResponseWriter, r *http.Request, err error) {
	httpx.WriteError(w, r, rt.log, err)
}

func (rt *Runtime) handleCreate(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	var body struct {
		Message     *string         `json:"message"`
		Title       *string         `json:"title"`
		Metadata    json.RawMessage `json:"metadata"`
		Model       *string         `json:"model"`
		Attachments []string        `json:"attachments"`
	}
	if err := decodeOptional(r, &body); err != nil {
		rt.fail(w, r, err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	var message, title string
	if body.Message != nil {
		message = *body.Message
		if strings.TrimSpace(message) == "" && len(body.Attachments) == 0 {
			rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_message", "The message is empty."))
			return
		}
	}
	if body.Title != nil {
		title = *body.Title
	}
	var metadata string
	if len(body.Metadata) > 0 && string(body.Metadata) != "null" {
		if len(body.Metadata) > store.MaxRunMetadata {
			rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_metadata", fmt.Sprintf("The metadata is over %d bytes.", store.MaxRunMetadata)))
			return
		}
		metadata = string(body.Metadata)
	}
	if body.Model != nil {
		// The model may be given by itself, or in the metadata: once.
		if m, err := parseRunMetadata(metadata); err == nil && m.Model != nil && *m.Model != *body.Model {
			rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_model", "The model and the metadata's model differ: give it once."))
			return
		}
		if err := rt.checkModel(*body.Model); err != nil {
			rt.fail(w, r, err)
			return
		}
		if metadata, err = withModel(metadata, *body.Model); err != nil {
			rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_metadata", "The metadata is not usable: "+err.Error()+"."))
			return
		}
	}
	run, created, err := rt.CreateRun(r.Context(), owner, senderOf(r), NewRun{Title: title, Message: message, IdempotencyKey: key, Metadata: metadata, Attachments: body.Attachments})
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/api/assistant/runs/"+run.ID)
	httpx.WriteJSON(w, status, viewRun(run))
}

func (rt *Runtime) handleList(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	runs, err := rt.st.ListRuns(r.Context(), owner)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	views := make([]RunView, len(runs))
	for i, run := range runs {
		views[i] = viewRun(run)
	}
	pins, err := rt.st.ListPins(r.Context(), owner)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	views = pinnedFirst(views, pins)
	active := 0
	for _, run := range runs {
		if run.Status == store.RunInProgress || run.Status == store.RunAwaitingApproval {
			active++
		}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"runs": views, "limits": RunLimits{
		ActiveRuns: active, MaxActiveRuns: rt.o.MaxActiveRuns, MaxAttachmentBytes: rt.o.AttachmentMaxBytes,
		DeleteInactiveAfter: int64(rt.o.DeleteInactiveAfter / time.Second), PurgeDeletedAfter: int64(rt.o.PurgeDeletedAfter / time.Second),
	}})
}

func (rt *Runtime) handleGet(w http.ResponseWriter, r *http.Request) {
	run, ok := rt.ownRun(w, r)
	if !ok {
		return
	}
	// Both windows of the line the run was read with.
	first, err := rt.page(r, run.ID, pageQuery{after: 0, take: firstWindow, maxBytes: firstWindowBytes, branch: &run.ActiveBranch})
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	var last messagePage
	var lastAfter int64
	if n := len(first.Messages); n > 0 {
		lastAfter = first.Messages[n-1].Seq
	}
	if first.HasMore {
		last, err = rt.page(r, run.ID, pageQuery{before: -1, take: lastWindow, maxBytes: lastWindowBytes, branch: &run.ActiveBranch})
		if err != nil {
			rt.fail(w, r, err)
			return
		}
		// Drop what the first window already holds.
		for len(last.Messages) > 0 && last.Messages[0].Seq <= lastAfter {
			last.Messages = last.Messages[1:]
		}
	}
	gap, err := rt.gapBetween(r.Context(), run, first.Messages, last.Messages, first.HasMore)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	children, err := rt.st.ChildRuns(r.Context(), run.ID)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	out := map[string]any{
		"run":         viewRun(run),
		"first":       nonNilViews(first.Messages),
		"last":        nonNilViews(last.Messages),
		"gap":         gap,
		"messages":    run.MessageCount,
		"continuedIn": append([]string{}, children...),
	}
	switch s, err := rt.st.LatestSnapshot(r.Context(), run.ID); {
	case err == nil:
		out["snapshot"] = SnapshotView{Version: s.Version, FromSeq: s.FromSeq, ToSeq: s.ToSeq, Summary: s.Summary,
			Tokens: s.Tokens, Kind: string(s.Kind), Model: s.Model, CreatedAt: s.CreatedAt}
	case !errors.Is(err, store.ErrNotFound):
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

func nonNilViews(v []EventView) []EventView {
	if v == nil {
		return []EventView{}
	}
	return v
}

func (rt *Runtime) handleDelete(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	if err := rt.Delete(r.Context(), owner, r.PathValue("id")); err != nil {
		rt.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (rt *Runtime) handleClose(to store.RunStatus) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		owner, ok := principal(r)
		if !ok {
			rt.fail(w, r, errUnauthenticated)
			return
		}
		run, err := rt.Close(r.Context(), owner, r.PathValue("id"), to)
		if err != nil {
			rt.fail(w, r, err)
			return
		}
		httpx.WriteJSON(w, http.StatusOK, viewRun(run))
	}
}

func (rt *Runtime) handlePost(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	var wait time.Duration
	if s := r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > maxWait {
			rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_wait", "wait must be a duration such as 60s, at most 120s."))
			return
		}
		wait = d
	}
	var body struct {
		Content     *string  `json:"content"`
		Attachments []string `json:"attachments"`
	}
	if err := decode(r, &body); err != nil {
		rt.fail(w, r, err)
		return
	}
	if body.Content == nil {
		rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_message", "The body needs a content field."))
		return
	}
	content := *body.Content
	key, err := idempotencyKey(r)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	var sub *runSub
	if wait > 0 {
		// Following the turn holds one of the caller's live-update places
		// (see bus.holdStream). With none free the message is still
		// posted, and answered queued at once, as a post without wait:
		// the cap bounds what a caller holds, not what it may say.
		if release, err := rt.bus.holdStream(owner); err != nil {
			wait = 0
		} else {
			defer release()
			// Subscribe before posting: the turn may end before the
			// post returns.
			var leave func()
			sub, _, leave = rt.bus.joinRun(r.PathValue("id"))
			defer leave()
		}
	}
	ev, run, _, err := rt.PostMessageWith(r.Context(), owner, senderOf(r), r.PathValue("id"), content, key, body.Attachments)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	// From here on the message is stored: whatever fails, the answer is
	// the stored message, never an error.
	queued := func() {
		httpx.WriteJSON(w, http.StatusAccepted, map[string]any{"runId": run.ID, "seq": ev.Seq, "status": "queued", "run": viewRun(run)})
	}
	if wait == 0 {
		queued()
		return
	}
	out, err := rt.waitTurn(r.Context(), sub, owner, run.ID, ev.Seq, wait, &run)
	if err != nil {
		if r.Context().Err() == nil {
			rt.log.Warn("assistant: following a stored message's turn failed; answering with the message", "run", run.ID, "seq", ev.Seq, "err", err)
		}
		queued()
		return
	}
	body2 := map[string]any{"runId": run.ID, "seq": ev.Seq, "status": out.Status, "run": viewRun(out.Run),
		"messages": nonNilViews(viewEvents(out.Messages))}
	if out.End != nil && out.End.Error != "" {
		body2["error"] = out.End.Error
	}
	if reply, ok := lastReply(out.Messages); ok {
		body2["reply"] = reply
	}
	status := http.StatusOK
	if out.Status == "running" || out.Status == "awaiting_approval" {
		status = http.StatusAccepted
	}
	httpx.WriteJSON(w, status, body2)
}

// lastReply is the text of the last assistant message.
func lastReply(events []store.Event) (string, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type != EventAssistantMessage {
			continue
		}
		var m AssistantMessage
		if json.Unmarshal(events[i].Payload, &m) == nil && m.Content != "" {
			return m.Content, true
		}
	}
	return "", false
}

func (rt *Runtime) handleMessages(w http.ResponseWriter, r *http.Request) {
	run, ok := rt.ownRun(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	pq := pageQuery{take: defaultTake, maxBytes: defaultPageBytes}
	var errs []string
	intParam := func(name string, min, max int64, into *int64) {
		s := q.Get(name)
		if s == "" {
			return
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < min || n > max {
			errs = append(errs, name+" must be a whole number from "+strconv.FormatInt(min, 10)+" to "+strconv.FormatInt(max, 10))
			return
		}
		*into = n
	}
	var take, maxBytes int64 = defaultTake, defaultPageBytes
	intParam("before", 1, 1<<53, &pq.before)
	intParam("after", 0, 1<<53, &pq.after)
	intParam("take", 1, maxTake, &take)
	intParam("maxBytes", 1024, maxPageBytes, &maxBytes)
	var branch int64 = -1
	intParam("branch", 0, 1<<53, &branch)
	if q.Has("before") && q.Has("after") {
		errs = append(errs, "give before or after, not both")
	}
	if len(errs) > 0 {
		rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_query", strings.Join(errs, "; ")+"."))
		return
	}
	if branch > run.Branches {
		rt.fail(w, r, errBranchNotFound)
		return
	}
	if branch < 0 {
		branch = run.ActiveBranch // the line the run was read with
	}
	pq.branch = &branch
	pq.take, pq.maxBytes = int(take), int(maxBytes)
	if !q.Has("before") && !q.Has("after") {
		pq.before = -1 // the latest messages
	}
	page, err := rt.page(r, run.ID, pq)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"messages": nonNilViews(page.Messages), "hasMore": page.HasMore})
}

func (rt *Runtime) handleEvents(w http.ResponseWriter, r *http.Request) {
	run, ok := rt.ownRun(w, r)
	if !ok {
		return
	}
	var after int64
	if s := r.URL.Query().Get("after"); s != "" {
		var err error
		if after, err = strconv.ParseInt(s, 10, 64); err != nil || after < 0 {
			rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_query", "after must be a sequence number (0 or more)."))
			return
		}
	}
	if s := r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > maxLongPoll {
			rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_wait", "wait must be a duration such as 30s, at most 60s."))
			return
		}
		rt.longPoll(w, r, run, after, d)
		return
	}
	events, err := rt.st.ListEvents(r.Context(), run.ID, after, maxEventsPage)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"events": nonNilViews(viewEvents(events)), "hasMore": len(events) == maxEventsPage})
}
