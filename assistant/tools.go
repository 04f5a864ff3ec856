package assistant

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// The _meta keys of Usher's MCP server the runner uses. They are strings
// of the MCP protocol, not an import: the runner reaches tools over MCP
// like any other client.
const (
	metaToolCallID = "usher/tool_call_id"
	metaApproval   = "usher/approval"
)

// Grant is what a turn's broker tokens say: the user (the run's owner) and
// the run, and the tenant and groups the user's message was sent with.
type Grant struct {
	Owner  string
	RunID  string
	Tenant string
	Groups []string
}

// equal reports whether g and o grant the same.
func (g Grant) equal(o Grant) bool {
	return g.Owner == o.Owner && g.RunID == o.RunID && g.Tenant == o.Tenant && slices.Equal(g.Groups, o.Groups)
}

// TokenSource returns the source of broker tokens for a grant: tokens for
// Usher's MCP server, carrying the user's identity, renewed before they
// expire.
type TokenSource func(ctx context.Context, g Grant) oauth2.TokenSource

// session is a run's connection to the MCP server and the tools it offers.
// It is held across turns (see holder) and used by one turn at a time.
type session struct {
	runID string
	grant Grant
	cs    *mcp.ClientSession
	tools []model.Tool
	// holdID names the session's hold in the store (store.HeldSession).
	holdID string

	// Guarded by holder.mu.
	inUse    bool
	armed    bool // an approval of the run is pending
	gone     bool // its run was closed while a turn used it: closed on release
	lastUsed time.Time

	closeOnce sync.Once
}

// close ends the MCP session, once.
func (s *session) close(log *slog.Logger) {
	s.closeOnce.Do(func() {
		if err := s.cs.Close(); err != nil {
			log.Debug("assistant: closing an MCP session", "run", s.runID, "err", err)
		}
	})
}

// holdStore is what the holder records its holds in.
type holdStore interface {
	HoldSession(ctx context.Context, h store.HeldSession) (store.HeldSession, error)
	ReleaseHold(ctx context.Context, runID, holdID, reason string) (bool, error)
	GetHold(ctx context.Context, runID string) (store.HeldSession, error)
	HoldsOf(ctx context.Context, replica string) ([]store.HeldSession, error)
	ReleaseGoneHolds(ctx context.Context, except string) ([]store.HeldSession, error)
}

// holder keeps each run's session between turns and releases it after a
// quiet period, never while an approval of the run is armed. Each hold is
// recorded in the store under this replica's id, and released there by a
// compare-and-swap, once, whoever releases it first: the run's close,
// deletion or parking (in the store's own transaction), the hold's idle
// time, a failed turn, another replica's hold of the run, or a reaper.
// Whatever released it, the session is closed once, here.
type holder struct {
	endpoint string
	tokens   TokenSource
	base     *http.Client
	idle     time.Duration
	now      func() time.Time
	log      *slog.Logger
	st       holdStore
	replica  string

	// checks are the runs whose hold to check (see poke).
	checks chan string

	mu       sync.Mutex
	sessions map[string]*session
	// releasing are the holds (by hold id) of sessions taken out of
	// sessions whose release the store has not yet answered: reap does
	// not count them lost meanwhile.
	releasing map[string]bool
	// closing are the sessions taken out of sessions to be closed outside
	// h.mu: forget waits for those of its run (see closeTaken).
	closing map[*session]bool
}

// poke asks for the run's hold to be checked, when this process holds the
// run's session idle: the run was closed, parked or held by another
// replica, perhaps. It never blocks: a check dropped is the reaper's.
func (h *holder) poke(runID string) {
	h.mu.Lock()
	s := h.sessions[runID]
	idle := s != nil && !s.inUse
	h.mu.Unlock()
	if !idle {
		return
	}
	select {
	case h.checks <- runID:
	default:
	}
}

// watch checks the runs poked until ctx ends: a session whose hold the
// store released, or gave another, is closed at once.
func (h *holder) watch(ctx context.Context) {
	for {
		var runID string
		select {
		case <-ctx.Done():
			return
		case runID = <-h.checks:
		}
		hs, err := h.st.GetHold(ctx, runID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			continue
		}
		h.mu.Lock()
		s := h.sessions[runID]
		if s == nil || s.inUse || (err == nil && hs.HoldID == s.holdID && hs.ReleasedAt.IsZero()) {
			s = nil
		} else {
			delete(h.sessions, runID)
			h.closingLocked(s)
		}
		h.mu.Unlock()
		if s != nil {
			h.closeTaken(s)
		}
	}
}

// holdTimeout bounds the store writes of a release that must happen
// whatever the caller's context.
const holdTimeout = 10 * time.Second

// acquire returns the run's held session, or connects a new one (also
// when the held one was opened with another grant: the user's groups
// changed). held reports which. A new session is recorded as this
// replica's hold of the run, which releases another replica's.
func (h *holder) acquire(ctx context.Context, g Grant) (_ *session, held bool, _ error) {
	runID := g.RunID
	h.mu.Lock()
	if s, ok := h.sessions[runID]; ok && s.grant.equal(g) && !s.inUse {
		s.inUse = true
		h.mu.Unlock()
		return s, true, nil
	}
	h.mu.Unlock()

	s, err := h.connect(ctx, g)
	if err != nil {
		return nil, false, err
	}
	s.inUse = true
	s.holdID = rand.Text()
	// In the map before the store: a reaper that finds the hold in the
	// store finds it here too.
	h.mu.Lock()
	old := h.sessions[runID]
	h.sessions[runID] = s
	h.mu.Unlock()
	if old != nil && !old.inUse {
		h.releaseHold(old, store.ReleaseMoved)
		old.close(h.log)
	}
	if _, err := h.st.HoldSession(ctx, store.HeldSession{RunID: runID, Replica: h.replica, HoldID: s.holdID}); err != nil {
		h.log.Warn("assistant: recording a held MCP session failed", "run", runID, "err", err)
	}
	return s, false, nil
}

// releaseHold releases s's hold in the store; false when it was released
// already (by another).
func (h *holder) releaseHold(s *session, reason string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), holdTimeout)
	defer cancel()
	defer func() {
		h.mu.Lock()
		delete(h.releasing, s.holdID)
		h.mu.Unlock()
	}()
	released, err := h.st.ReleaseHold(ctx, s.runID, s.holdID, reason)
	if err != nil {
		h.log.Warn("assistant: releasing a held MCP session failed", "run", s.runID, "err", err)
	}
	return released
}

// release returns a session after a turn; armed keeps it past the idle
// period while an approval waits. A session whose run was closed while
// the turn used it is closed now, and so is one whose place another
// session of the run took meanwhile (acquire connected anew while this
// one was in use): nothing holds it any more, so neither the idle
// reaper nor a stopping runtime would ever close it.
func (h *holder) release(s *session, armed bool) {
	h.mu.Lock()
	s.inUse, s.armed, s.lastUsed = false, armed, h.now()
	current := h.sessions[s.runID] == s
	if s.gone && current {
		delete(h.sessions, s.runID)
	}
	h.mu.Unlock()
	if s.gone || !current {
		s.close(h.log)
	}
}

// drop closes and forgets a session, releasing its hold for reason.
func (h *holder) drop(s *session, reason string) {
	h.mu.Lock()
	if h.sessions[s.runID] == s {
		h.takeLocked(s)
	}
	h.closingLocked(s)
	h.mu.Unlock()
	h.releaseHold(s, reason)
	h.closeTaken(s)
}

// takeLocked takes s out of the sessions to release its hold, which is
// releasing until releaseHold has its answer. h.mu is held.
func (h *holder) takeLocked(s *session) {
	delete(h.sessions, s.runID)
	if h.releasing == nil {
		h.releasing = map[string]bool{}
	}
	h.releasing[s.holdID] = true
}

// closingLocked notes that s, out of the sessions, is about to be closed
// outside h.mu (by closeTaken). h.mu is held.
func (h *holder) closingLocked(s *session) {
	if h.closing == nil {
		h.closing = map[*session]bool{}
	}
	h.closing[s] = true
}

// closeTaken closes s, noted by closingLocked, and forgets it.
func (h *holder) closeTaken(s *session) {
	s.close(h.log)
	h.mu.Lock()
	delete(h.closing, s)
	h.mu.Unlock()
}

// forget closes the run's session, whose hold the store released with the
// run (closed or deleted): at once when no turn uses it, else when the
// turn returns it. A session of the run that another is closing already
// (the store's notice of the release reached watch first, say) is closed
// when forget returns, as one it closes itself is.
func (h *holder) forget(runID string) {
	h.mu.Lock()
	var closing []*session
	for c := range h.closing {
		if c.runID == runID {
			closing = append(closing, c)
		}
	}
	s := h.sessions[runID]
	switch {
	case s == nil:
	case s.inUse:
		s.gone, s = true, nil
	default:
		delete(h.sessions, runID)
	}
	h.mu.Unlock()
	if s != nil {
		s.close(h.log)
	}
	// session.close returns once the session is closed, whoever closes
	// it (sync.Once).
	for _, c := range closing {
		c.close(h.log)
	}
}

// reap releases the sessions quiet for longer than the idle period and not
// armed, and the armed ones whose run keep reports it no longer waits
// here; then it makes this process and the store agree: it closes the
// sessions whose hold the store released (the run was closed, parked or
// held by another replica), releases the holds the store names this
// replica for that the process no longer has, and the holds of replicas
// whose heartbeat is gone. It returns how many sessions it closed.
func (h *holder) reap(ctx context.Context, keep func(runID string) bool) int {
	now := h.now()
	var idle []*session
	h.mu.Lock()
	for id, s := range h.sessions {
		if s.inUse || now.Sub(s.lastUsed) < h.idle {
			continue
		}
		if s.armed && keep(id) {
			continue
		}
		h.takeLocked(s)
		h.closingLocked(s)
		idle = append(idle, s)
	}
	h.mu.Unlock()
	for _, s := range idle {
		h.releaseHold(s, store.ReleaseHoldIdle)
		h.closeTaken(s)
	}
	closed := len(idle)

	// The store's holds are read before the map: a session is in the map
	// before its hold is in the store.
	holds, err := h.st.HoldsOf(ctx, h.replica)
	if err != nil {
		h.log.Warn("assistant: reading this replica's held MCP sessions failed", "err", err)
		return closed
	}
	recorded := map[string]string{}
	for _, hs := range holds {
		recorded[hs.RunID] = hs.HoldID
	}
	var released []*session
	var lost []store.HeldSession
	h.mu.Lock()
	for id, s := range h.sessions {
		if !s.inUse && recorded[id] != s.holdID {
			delete(h.sessions, id)
			h.closingLocked(s)
			released = append(released, s)
		}
	}
	for _, hs := range holds {
		if s := h.sessions[hs.RunID]; (s == nil || s.holdID != hs.HoldID) && !h.releasing[hs.HoldID] {
			lost = append(lost, hs)
		}
	}
	h.mu.Unlock()
	for _, s := range released {
		h.closeTaken(s)
	}
	for _, hs := range lost {
		if _, err := h.st.ReleaseHold(ctx, hs.RunID, hs.HoldID, store.ReleaseLost); err != nil {
			h.log.Warn("assistant: releasing a lost MCP session hold failed", "run", hs.RunID, "err", err)
		}
	}
	if gone, err := h.st.ReleaseGoneHolds(ctx, h.replica); err != nil {
		h.log.Warn("assistant: releasing the held MCP sessions of replicas gone failed", "err", err)
	} else if len(gone) > 0 {
		h.log.Info("assistant: released the held MCP sessions of replicas gone", "count", len(gone))
	}
	return closed + len(released)
}

// closeAll releases every session, when the runtime stops.
func (h *holder) closeAll() {
	h.mu.Lock()
	all := h.sessions
	h.sessions = map[string]*session{}
	h.mu.Unlock()
	for _, s := range all {
		h.releaseHold(s, store.ReleaseStopped)
		s.close(h.log)
	}
}

// held reports how many sessions are held.
func (h *holder) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// streamResumes is how often the client reconnects to resume a call's
// response stream that broke after it carried an event id (a stateful
// endpoint's streams begin with one, and any replica replays what the
// stream missed), before the call is given up as lost. Without a resume
// the SDK's client fails the whole session ("failed to reconnect"), and
// the turn with it, where the call's answer was one reconnection away. A
// stream without an event id (the stateless endpoint's) cannot be resumed:
// its call fails at once and is asked again under its key (see callTool).
const streamResumes = 2

// connect opens an MCP session as the user, for the run, and lists its
// tools.
func (h *holder) connect(ctx context.Context, g Grant) (*session, error) {
	httpClient := &http.Client{
		Transport: &oauth2.Transport{Source: h.tokens(context.WithoutCancel(ctx), g), Base: h.base.Transport},
		Timeout:   h.base.Timeout,
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "usher-assistant", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: h.endpoint, HTTPClient: httpClient, DisableStandaloneSSE: true, MaxRetries: streamResumes,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("assistant: connect to the MCP server: %w", err)
	}
	s := &session{runID: g.RunID, grant: g, cs: cs}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			s.close(h.log)
			return nil, fmt.Errorf("assistant: list tools: %w", err)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			s.close(h.log)
			return nil, fmt.Errorf("assistant: tool %s: input schema: %w", t.Name, err)
		}
		s.tools = append(s.tools, model.Tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	return s, nil
}

// maxToolCallID is the longest tool call id the MCP server takes.
const maxToolCallID = 256

// callKey names a tool call to the MCP server (its usher/tool_call_id,
// which with the run forms the call's idempotency key): the sequence of
// the assistant message event that carries the call, and the model's call
// id. The model's id alone is not enough: a model server may use one id
// again for a later call, which would then be answered with the first
// call's result, or refused. The retry of a call (after an approval, or
// a crash) comes from the same event, so it has the same key. The sequence
// is digits, ended by "/" before the id, or by "#" before the SHA-256 of
// an id that would not fit (too long, or with control characters), so no
// two calls share a key.
func callKey(seq int64, id string) string {
	key := strconv.FormatInt(seq, 10) + "/" + id
	if len(key) > maxToolCallID || strings.ContainsFunc(id, isControl) {
		sum := sha256.Sum256([]byte(id))
		key = strconv.FormatInt(seq, 10) + "#" + hex.EncodeToString(sum[:])
	}
	return key
}

// call runs one tool call through the MCP server, named by key (see
// callKey), and turns its answer into a ToolResult. An error means the
// call did not reach the MCP server, or its answer did not come back
// (lostAfterSending tells which); the MCP server's idempotency key makes
// a retry safe.
func (s *session) call(ctx context.Context, key string, c ToolCall) (ToolResult, error) {
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{
		Name:      c.Name,
		Arguments: c.Arguments,
		Meta:      mcp.Meta{metaToolCallID: key},
	})
	if err != nil {
		if wire := (*jsonrpc.Error)(nil); errors.As(err, &wire) && wire.Code != codeRejectedByTransport {
			// The server refused the call as a request (an unknown
			// tool, say): that is the call's result.
			return ToolResult{ToolCallID: c.ID, Name: c.Name, Content: "The tool call was refused: " + wire.Message,
				IsError: true, Status: ToolFailed}, nil
		}
		return ToolResult{}, err
	}
	r := ToolResult{ToolCallID: c.ID, Name: c.Name, IsError: res.IsError, Status: ToolSucceeded}
	if res.IsError {
		r.Status = ToolFailed
	}
	var text []string
	for _, content := range res.Content {
		if t, ok := content.(*mcp.TextContent); ok {
			text = append(text, t.Text)
		} else if p, ok := partOf(content); ok && len(r.Parts) < maxResultParts {
			r.Parts = append(r.Parts, p)
		}
	}
	r.Content = strings.Join(text, "\n")
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			r.Structured = b
		}
	}
	if a, ok := approvalMeta(res.Meta); ok {
		r.Approval = &a
		if a.Status == "pending" {
			r.Status = ToolApprovalPending
		}
	}
	return r, nil
}

// codeRejectedByTransport is the go-sdk's JSON-RPC code for a request its
// transport failed to deliver or to get an answer to: not an answer of
// the MCP server.
const codeRejectedByTransport = -32005

// lostAfterSending reports whether err, from a call, says that the
// connection was lost after the request went out: the MCP server may
// have run the call. A request that could not be sent at all (no
// connection could be made) was not.
func lostAfterSending(err error) bool {
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != codeRejectedByTransport {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// partOf describes content beyond text; false for a kind it does not
// know.
func partOf(content mcp.Content) (ContentPart, bool) {
	switch c := content.(type) {
	case *mcp.ImageContent:
		return ContentPart{Kind: "image", MIMEType: c.MIMEType, Size: int64(len(c.Data))}, true
	case *mcp.AudioContent:
		return ContentPart{Kind: "audio", MIMEType: c.MIMEType, Size: int64(len(c.Data))}, true
	case *mcp.EmbeddedResource:
		if c.Resource == nil {
			return ContentPart{Kind: "resource"}, true
		}
		return ContentPart{Kind: "resource", URI: c.Resource.URI, MIMEType: c.Resource.MIMEType,
			Size: int64(len(c.Resource.Text) + len(c.Resource.Blob))}, true
	case *mcp.ResourceLink:
		p := ContentPart{Kind: "resource_link", URI: c.URI, Name: cmp.Or(c.Title, c.Name), MIMEType: c.MIMEType}
		if c.Size != nil && *c.Size > 0 {
			p.Size = *c.Size
		}
		return p, true
	}
	return ContentPart{}, false
}

// approvalMeta reads the approval a result names in _meta.
func approvalMeta(meta mcp.Meta) (ApprovalRef, bool) {
	raw, ok := meta[metaApproval]
	if !ok {
		return ApprovalRef{}, false
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return ApprovalRef{}, false
	}
	var a ApprovalRef
	if err := json.Unmarshal(b, &a); err != nil || a.ID == "" {
		return ApprovalRef{}, false
	}
	return a, true
}
