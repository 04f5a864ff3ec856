//lint:file-ignore SA1019 The MCP logging feature is deprecated as of 2026-07-28 (SEP-2577) but works during its deprecation window, and callers of the older protocols use it: Usher passes upstream log messages through while it does.

package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// downstream is what a proxied call needs of the call it serves: where its
// notifications go (see the package documentation).
type downstream struct {
	session       *mcp.ServerSession
	progressToken any    // the caller's progress token; nil for none
	logLevel      string // the caller's log level (2026-07-28); "" for none
	// record audits a request relayed to the caller (see relay).
	record func(ctx context.Context, ev Event, kind string) bool
	// closeStream closes the caller's response stream of the call, with
	// a retry field (see pause); nil when the caller cannot resume it.
	closeStream func(mcp.CloseSSEStreamArgs)
	protocol    string // the caller's protocol version, from its header
}

type downstreamKey struct{}

// withDownstream returns ctx carrying the downstream of a tools/call. Its
// response stream may be closed for the caller to resume (see pause) only
// when resumable: the endpoint is stateful, with an event store.
func withDownstream(ctx context.Context, r *mcp.CallToolRequest, resumable bool, record func(context.Context, Event, string) bool) context.Context {
	d := downstream{session: r.Session, progressToken: r.Params.GetProgressToken(), record: record}
	d.logLevel, _ = r.Params.Meta[mcp.MetaKeyLogLevel].(string)
	if resumable && r.Extra != nil {
		d.closeStream, d.protocol = r.Extra.CloseSSEStream, r.Extra.Header.Get("Mcp-Protocol-Version")
	}
	return context.WithValue(ctx, downstreamKey{}, d)
}

// withRequestDownstream returns ctx carrying the downstream of a request
// other than a tool call (prompts/get, resources/read) of session: of
// what the upstream sends during it, only its requests reach the caller,
// relayed on a stateful session or as rounds of protocol 2026-07-28, each
// audited with record (see relay and heldCall).
func withRequestDownstream(ctx context.Context, session *mcp.ServerSession, record func(context.Context, Event, string) bool) context.Context {
	return context.WithValue(ctx, downstreamKey{}, downstream{session: session, record: record})
}

// inflight is a call in flight to an upstream.
type inflight struct {
	ctx context.Context // the handler context of the caller's request
	downstream
	id       string // the progress token given to the upstream
	upstream string
	action   Action      // what it does; "" for a tool call
	tool     string      // the tool called (or prompt, resource), as exposed
	stream   streamState // what the call's response streams showed
	// relayMeta: the request goes to an upstream of protocol 2026-07-28 on
	// a session that relays its requests for input (see relayMeta).
	relayMeta bool
}

// event is the audit event of what f's upstream asks of the caller
// during it: who called, and what, on which upstream.
func (f *inflight) event() Event {
	caller, _ := CallerFromContext(f.ctx)
	return Event{Principal: caller.Subject, ClientID: caller.ClientID, TokenID: caller.TokenID, RunID: caller.RunID,
		Action: f.action, Tool: f.tool, Server: f.upstream}
}

type inflightKey struct{}

// progress passes on progress reported under the call's token.
func (f *inflight) progress(p *mcp.ProgressNotificationParams) {
	if tok, _ := p.ProgressToken.(string); tok != f.id || f.progressToken == nil || f.session == nil {
		return
	}
	_ = f.session.NotifyProgress(f.ctx, &mcp.ProgressNotificationParams{
		ProgressToken: f.progressToken, Progress: p.Progress, Total: p.Total, Message: p.Message,
	})
}

// log passes on a log message, naming the upstream as its logger.
func (f *inflight) log(p *mcp.LoggingMessageParams) {
	if f.session == nil {
		return
	}
	logger := f.upstream
	if p.Logger != "" {
		logger += "/" + p.Logger
	}
	_ = f.session.Log(f.ctx, &mcp.LoggingMessageParams{Level: p.Level, Logger: logger, Data: p.Data})
}

// notify passes on one JSON-RPC message of the call's response stream if it
// is a progress or log notification, and reports whether it is a response
// (the call's answer: the only one such a stream carries).
func (f *inflight) notify(data []byte) (response bool) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(data, &m) != nil {
		return false
	}
	if m.ID != nil {
		return m.Method == ""
	}
	switch m.Method {
	case "notifications/progress":
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(m.Params, &p) == nil {
			f.progress(&p)
		}
	case "notifications/message":
		var p mcp.LoggingMessageParams
		if json.Unmarshal(m.Params, &p) == nil {
			f.log(&p)
		}
	}
	return false
}

// notesTransport is a stdio upstream's transport, which counts the
// progress and log notifications read from the process. The SDK hands
// notifications over to their handlers in goroutines of their own, apart
// from results, so a call's result may reach Usher before the last
// notification its upstream sent ahead of it: a call waits (awaitNotes)
// until every notification read before its result has been handed over,
// so that it is passed on before the result, as over HTTP.
type notesTransport struct {
	mcp.Transport
	c *conn
}

func (t *notesTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &notesConnection{Connection: conn, c: t.c}, nil
}

// notesConnection counts the notifications it reads (see notesTransport).
type notesConnection struct {
	mcp.Connection
	c *conn
}

func (n *notesConnection) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := n.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && !r.ID.IsValid() && (r.Method == "notifications/progress" || r.Method == "notifications/message") {
		n.c.mu.Lock()
		n.c.notesRead++
		n.c.mu.Unlock()
	}
	return m, err
}

// maxNotesWait bounds how long a call waits for the notifications read
// before its result to be handed over (one that the SDK refuses is never
// handed over).
const maxNotesWait = 500 * time.Millisecond

// handed counts a notification handed over by the SDK.
func (c *conn) handed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notesHanded++
	if c.noteHanded != nil {
		close(c.noteHanded)
		c.noteHanded = nil
	}
}

// awaitNotes returns once every notification read so far has been handed
// over, after maxNotesWait, or when ctx ends.
func (c *conn) awaitNotes(ctx context.Context) {
	timeout := time.NewTimer(maxNotesWait)
	defer timeout.Stop()
	c.mu.Lock()
	want := c.notesRead
	for c.notesHanded < want {
		if c.noteHanded == nil {
			c.noteHanded = make(chan struct{})
		}
		ch := c.noteHanded
		c.mu.Unlock()
		select {
		case <-ch:
		case <-timeout.C:
			return
		case <-ctx.Done():
			return
		}
		c.mu.Lock()
	}
	c.mu.Unlock()
}

// forwardProgress passes on a stdio upstream's progress.
func (c *conn) forwardProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	defer c.handed()
	id, _ := req.Params.ProgressToken.(string)
	c.mu.Lock()
	f := c.inflight[id]
	c.mu.Unlock()
	if f != nil {
		f.progress(req.Params)
	}
}

// forwardLog passes on a stdio upstream's log message.
func (c *conn) forwardLog(_ context.Context, req *mcp.LoggingMessageRequest) {
	defer c.handed()
	c.mu.Lock()
	calls := slices.Collect(maps.Values(c.inflight))
	c.mu.Unlock()
	for _, f := range calls {
		f.log(req.Params)
	}
}

// capabilities are the endpoint's: tools, resources, prompts and
// completions (the catalog's, built-in and federated), and logging for the
// messages of upstreams, with listChanged and resource subscriptions. A
// stateful endpoint sends them on its sessions; a stateless one on the
// subscriptions/listen requests of protocol 2026-07-28, and its handshake
// of the older protocols answers without them (see Server.initialize).
func capabilities() *mcp.ServerCapabilities {
	return &mcp.ServerCapabilities{
		Tools: &mcp.ToolCapabilities{ListChanged: true}, Resources: &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
		Prompts: &mcp.PromptCapabilities{ListChanged: true}, Completions: &mcp.CompletionCapabilities{}, Logging: &mcp.LoggingCapabilities{},
	}
}

// The names of the entries announce registers with the SDK for a moment.
const (
	announceTool     = "usher.list-changed"
	announceURI      = "usher:list-changed"
	announcePromptID = "usher.list-changed"
)

// announce sends notifications/{tools,resources,prompts}/list_changed, as
// ch says, to every stateful session. The SDK sends them (to the
// standalone stream of each session, debounced) when a feature is added
// to or removed from its registry, and offers no other way: so an entry
// is added and removed at once. Its registry is never served (dispatch
// answers every listing and call from the catalog), so the entry is never
// seen.
func (s *Server) announce(ch listChanges) {
	if ch.tools {
		s.sdk.AddTool(&mcp.Tool{Name: announceTool, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return nil, errors.New("never called")
			})
		s.sdk.RemoveTools(announceTool)
	}
	if ch.resources {
		s.sdk.AddResource(&mcp.Resource{URI: announceURI, Name: announceURI},
			func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return nil, errors.New("never called")
			})
		s.sdk.RemoveResources(announceURI)
	}
	if ch.prompts {
		s.sdk.AddPrompt(&mcp.Prompt{Name: announcePromptID},
			func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return nil, errors.New("never called")
			})
		s.sdk.RemovePrompts(announcePromptID)
	}
}

// askForLogs asks an upstream, in a call's _meta (2026-07-28), for log
// messages at the caller's level, or at info as the SDK assumes for the
// handshake protocols.
func askForLogs(meta mcp.Meta, ds downstream) {
	level := ds.logLevel
	if level == "" {
		level = "info"
	}
	meta[mcp.MetaKeyLogLevel] = level
}

// askSessionForLogs asks an upstream session of a handshake protocol, which
// sends log messages only once asked, for all of them; each caller's own
// level then filters what it gets.
func askSessionForLogs(ctx context.Context, cs *mcp.ClientSession) error {
	ir := cs.InitializeResult()
	if ir == nil || ir.ProtocolVersion >= sessionlessVersion || ir.Capabilities == nil || ir.Capabilities.Logging == nil {
		return nil
	}
	return cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"})
}

// handleNotifications sets the SDK handlers that pass on a stdio
// upstream's notifications.
func (c *conn) handleNotifications(o *mcp.ClientOptions) {
	o.ProgressNotificationHandler = c.forwardProgress
	o.LoggingMessageHandler = c.forwardLog
}

// isEventStream reports whether resp is a server-sent event stream.
func isEventStream(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// maxTappedEvent bounds the event sseTap buffers; past it, the tap stops
// (the SDK still reads the stream).
const maxTappedEvent = 1 << 20

// sseTap reads a call's response stream on behalf of the SDK and passes on
// each notification in it as soon as the SDK has read it, so before the
// result that follows it. When the stream ends before the answer, it tells
// the call whether the stream can be resumed (see inflight.streamEnd).
type sseTap struct {
	body     io.ReadCloser
	f        *inflight
	line     []byte        // the current line, unfinished
	data     []byte        // the current event's data
	cr       bool          // the last byte seen ended a line with CR
	ended    bool          // the tap gave up
	answered bool          // the stream carried the call's answer
	sawID    bool          // an event had an id: the stream can be resumed
	retry    time.Duration // the last retry field; 0 for none
}

func (t *sseTap) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	if !t.ended {
		t.scan(p[:n])
		if err == io.EOF && !t.answered {
			t.ended = true
			t.f.streamEnd(t.sawID, t.retry)
		}
	}
	return n, err
}

func (t *sseTap) Close() error { return t.body.Close() }

// scan consumes bytes of the stream: lines end with CRLF, LF or CR, and an
// empty line ends an event, whose data lines are joined by LF.
func (t *sseTap) scan(b []byte) {
	for len(b) > 0 {
		if t.cr && b[0] == '\n' {
			b = b[1:]
			t.cr = false
			continue
		}
		t.cr = false
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			t.line = append(t.line, b...)
			break
		}
		t.line = append(t.line, b[:i]...)
		t.cr = b[i] == '\r'
		b = b[i+1:]
		t.endLine()
	}
	if len(t.line)+len(t.data) > maxTappedEvent {
		t.ended, t.line, t.data = true, nil, nil
	}
}

func (t *sseTap) endLine() {
	defer func() { t.line = t.line[:0] }()
	if len(t.line) == 0 {
		if len(t.data) > 0 && t.f.notify(t.data) {
			t.answered = true
		}
		t.data = t.data[:0]
		return
	}
	if v, ok := bytes.CutPrefix(t.line, []byte("id:")); ok && len(bytes.TrimSpace(v)) > 0 {
		t.sawID = true
		return
	}
	if v, ok := bytes.CutPrefix(t.line, []byte("retry:")); ok {
		if d, ok := parseRetry(bytes.TrimPrefix(v, []byte(" "))); ok {
			t.retry = d
		}
		return
	}
	v, ok := bytes.CutPrefix(t.line, []byte("data:"))
	if !ok {
		return
	}
	if len(t.data) > 0 {
		t.data = append(t.data, '\n')
	}
	t.data = append(t.data, bytes.TrimPrefix(v, []byte(" "))...)
}
