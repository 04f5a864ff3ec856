//lint:file-ignore SA1019 Logging is deprecated as of protocol 2026-07-28 (SEP-2577) but works during its deprecation window: the test sets a session's log level.

package mcpserver

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/broker"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// errDiskFull is a store failure of another kind than the database out of
// reach: its answer is the generic one.
var errDiskFull = errors.New("audit: append: disk full")

// genericRequestText is the start of internalError's message.
const genericRequestText = "The request could not be processed because of an error on the server."

// failKinds is next, but the records of kinds fail with err.
func failKinds(next Auditor, err error, kinds ...string) Auditor {
	return recordFunc(func(ctx context.Context, e Event) error {
		if slices.Contains(kinds, e.Kind) {
			return err
		}
		return next.Record(ctx, e)
	})
}

// wantRPCError checks that err is a JSON-RPC error of code whose message
// is want, or starts with it.
func wantRPCError(t *testing.T, what string, err error, code int64, want string) {
	t.Helper()
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != code || !strings.HasPrefix(je.Message, want) {
		t.Errorf("%s: %v; want a JSON-RPC error %d saying %q", what, err, code, want)
	}
}

// brokenRequest is the store's approvals, whose Request fails with err.
type brokenRequest struct {
	storeApprovals
	err error
}

func (b brokenRequest) Request(context.Context, ApprovalRequest) (store.Approval, error) {
	return store.Approval{}, b.err
}

// TestRequestsWhenTheDatabaseIsOutOfReach checks what a resources/read, a
// prompts/get, a completion/complete and a resources/subscribe are told
// when a record they need cannot be written because the database is out
// of reach: the same JSON-RPC error code as any failure of Usher's, with
// a message saying that nothing was sent upstream and that the request
// may be sent again shortly (unavailableRequestText); a failure of
// another kind keeps the generic message. Nothing reaches the upstream.
func TestRequestsWhenTheDatabaseIsOutOfReach(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cases := []struct {
		err  error
		want string
	}{
		{errOutOfReach, unavailableRequestText},
		{errDiskFull, genericRequestText},
	}
	t.Run("decision record", func(t *testing.T) {
		t.Parallel()
		for _, tt := range cases {
			up := newFeatureUpstream(t, "a", false)
			e := newEnv(t, envConfig{
				rules:     map[string]Decision{"a__test://static-text": Allow, "a__greet": Allow},
				upstreams: []Upstream{{Name: "a", URL: up.url}},
				server:    func(o *Options) { o.Auditor = failKinds(o.Auditor, tt.err, KindDecision) },
			})
			cs := e.connect(alice, "", nil, "")
			_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a__test://static-text"})
			wantRPCError(t, "resources/read with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.want)
			_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet", Arguments: map[string]string{"who": "Ada"}})
			wantRPCError(t, "prompts/get with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.want)
			_, err = cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: RefPrompt, Name: "a__greet"}, Argument: mcp.CompleteParamsArgument{Name: "who", Value: "A"}})
			wantRPCError(t, "completion/complete with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.want)
			if n := up.count("read test://static-text") + up.count("get greet") + up.count("complete greet"); n != 0 {
				t.Errorf("%d requests reached the upstream", n)
			}
		}
	})
	t.Run("approval's request", func(t *testing.T) {
		t.Parallel()
		for _, tt := range cases {
			up := newFeatureUpstream(t, "a", false)
			e := newEnv(t, envConfig{
				rules:     map[string]Decision{},
				upstreams: []Upstream{{Name: "a", URL: up.url}},
				server:    func(o *Options) { o.Approvals = brokenRequest{o.Approvals.(storeApprovals), tt.err} },
			})
			_, err := e.connect(alice, "", nil, "").ReadResource(ctx, &mcp.ReadResourceParams{URI: "a__test://static-text"})
			wantRPCError(t, "a read whose approval's request fails with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.want)
		}
	})
	t.Run("approval's use", func(t *testing.T) {
		t.Parallel()
		var fail atomic.Bool
		up := newFeatureUpstream(t, "a", false)
		e := newEnv(t, envConfig{
			rules:     map[string]Decision{},
			upstreams: []Upstream{{Name: "a", URL: up.url}},
			server: func(o *Options) {
				o.Approvals = brokenConsume{o.Approvals.(storeApprovals), &fail, errOutOfReach}
			},
		})
		cs := e.connect(alice, "", nil, "")
		read := func() error {
			_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a__test://static-text"})
			return err
		}
		id := approvalOf(t, read())
		if _, err := e.store.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: id, To: store.ApprovalApproved, DecidedBy: alice, Now: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
		fail.Store(true)
		wantRPCError(t, "a read whose approval's use fails with the database out of reach", read(), jsonrpc.CodeInternalError, unavailableRequestText)
		if n := up.count("read test://static-text"); n != 0 {
			t.Errorf("the read reached the upstream %d times", n)
		}
		fail.Store(false)
		if err := read(); err != nil {
			t.Errorf("the read once the database is back = %v, want it sent with the approval granted", err)
		}
	})
	t.Run("subscription record", func(t *testing.T) {
		t.Parallel()
		for _, tt := range cases {
			up := newFeatureUpstream(t, "up", true)
			e := newEnv(t, envConfig{
				rules:     map[string]Decision{"up__test://static-text": Allow},
				upstreams: []Upstream{{Name: "up", URL: up.url}},
				server: func(o *Options) {
					o.Stateful = true
					o.Auditor = failKinds(o.Auditor, tt.err, KindSubscribed)
				},
			})
			err := e.connect(alice, "", nil, "").Subscribe(ctx, &mcp.SubscribeParams{URI: "up__test://static-text"})
			wantRPCError(t, "resources/subscribe with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.want)
			if n := up.count("subscribe test://static-text"); n != 0 {
				t.Errorf("the subscription reached the upstream %d times", n)
			}
		}
	})
}

// TestRoundsWhenTheDatabaseIsOutOfReach checks the rounds of protocol
// 2026-07-28 whose records cannot be written because the database is out
// of reach: a retry whose refused state cannot be recorded, and an
// upstream's request for input that cannot be recorded, so is not passed
// on. A tools/call is told so in its result, a prompts/get in its
// JSON-RPC error (same code as before); a failure of another kind keeps
// the generic text.
func TestRoundsWhenTheDatabaseIsOutOfReach(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rules := map[string]Decision{"as__ask": Allow, "as__greet": Allow}
	t.Run("refused state", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			err             error
			wantTool, wantP string
		}{
			{errOutOfReach, unavailableText, unavailableRequestText},
			{errDiskFull, "The call could not be processed because of an error on the server.", genericRequestText},
		} {
			a := newAsker(t)
			e := askerEnv(t, a, rules, envConfig{server: func(o *Options) { o.Auditor = failKinds(o.Auditor, tt.err, KindInputStateRefused) }})
			cs := e.connect(alice, "", rounds(), "2026-07-28")
			if res := retry(t, cs, "as__ask", map[string]any{}, nil, accepted("Ada"), askerState); !res.IsError || !strings.HasPrefix(text(res), tt.wantTool) {
				t.Errorf("a tools/call whose refused state's record fails with %q = %s, want %q", tt.err, text(res), tt.wantTool)
			}
			_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "as__greet", InputResponses: accepted("Ada"), RequestState: askerState})
			wantRPCError(t, "a prompts/get whose refused state's record fails with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.wantP)
			if a.called("ask")+a.called("greet") != 0 {
				t.Error("a refused retry reached the upstream")
			}
		}
	})
	t.Run("input request's record", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			err             error
			wantTool, wantP string
		}{
			{errOutOfReach, inputUnavailableText, inputUnavailableRequestText},
			{errDiskFull, "The tool could not go on: the request for input could not be recorded.",
				"The upstream server asked for input that could not be passed on: the request for input could not be recorded."},
		} {
			a := newAsker(t)
			e := askerEnv(t, a, rules, envConfig{server: func(o *Options) { o.Auditor = failKinds(o.Auditor, tt.err, KindElicitationRequested) }})
			cs := e.connect(alice, "", rounds(), "2026-07-28")
			if res := call(t, cs, "as__ask", map[string]any{}, nil); !res.IsError || res.NeedsInput() || text(res) != tt.wantTool {
				t.Errorf("a tools/call whose request for input's record fails with %q = %s, want %q", tt.err, text(res), tt.wantTool)
			}
			_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "as__greet"})
			wantRPCError(t, "a prompts/get whose request for input's record fails with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.wantP)
		}
	})
}

// outageSessions is a store's sessions, whose records cannot be written
// while fail is set, failing with err.
type outageSessions struct {
	SessionStore
	fail *atomic.Bool
	err  error
}

func (o outageSessions) CreateMCPSession(ctx context.Context, s store.MCPSession) (store.MCPSession, error) {
	if o.fail.Load() {
		return store.MCPSession{}, o.err
	}
	return o.SessionStore.CreateMCPSession(ctx, s)
}

func (o outageSessions) UpdateMCPSessionState(ctx context.Context, id string, old, state []byte) error {
	if o.fail.Load() {
		return o.err
	}
	return o.SessionStore.UpdateMCPSessionState(ctx, id, old, state)
}

// TestSessionRecordsWhenTheDatabaseIsOutOfReach checks what a stateful
// session's requests are told when its record (Options.Sessions) cannot
// be written because the database is out of reach: the handshake, a
// log level and a subscription each say so, and that they may be tried
// again shortly, with the code of any failure of Usher's; a failure of
// another kind keeps its generic message.
func TestSessionRecordsWhenTheDatabaseIsOutOfReach(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tt := range []struct {
		err                  error
		start, level, subscr string
	}{
		{errOutOfReach, "The session was not started: " + outageText, "The log level could not be recorded: " + outageText,
			"The subscription could not be recorded: " + outageText},
		{errDiskFull, "the session could not be recorded", "the log level could not be recorded", "the subscription could not be recorded"},
	} {
		up := newFeatureUpstream(t, "up", true)
		st := storetest.NewSQLite(t)
		var fail atomic.Bool
		e := newEnv(t, envConfig{
			store:     st,
			rules:     map[string]Decision{"up__test://static-text": Allow},
			upstreams: []Upstream{{Name: "up", URL: up.url}},
			server: func(o *Options) {
				o.Stateful, o.Sessions = true, outageSessions{st, &fail, tt.err}
			},
		})
		cs := e.connect(alice, "", nil, "")
		fail.Store(true)
		err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"})
		wantRPCError(t, "logging/setLevel with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.level)
		err = cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "up__test://static-text"})
		wantRPCError(t, "resources/subscribe with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.subscr)

		src := e.broker.TokenSource(ctx, broker.Grant{Subject: alice, Audience: e.url + "/mcp"})
		next, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: src}}, DisableStandaloneSSE: true, MaxRetries: -1,
		}, &mcp.ClientSessionOptions{ProtocolVersion: sessionVersion})
		if err == nil {
			next.Close()
		}
		wantRPCError(t, "initialize with "+tt.err.Error(), err, jsonrpc.CodeInternalError, tt.start)
	}
}

// outageNotes are notes whose store is out of reach while out is set.
type outageNotes struct {
	Notes
	out *atomic.Bool
}

func (n outageNotes) GetNote(ctx context.Context, owner, name string) (store.Note, error) {
	if n.out.Load() {
		return store.Note{}, errors.Join(errors.New("get note"), store.ErrUnavailable)
	}
	return n.Notes.GetNote(ctx, owner, name)
}

// TestBuiltinToolWhenTheDatabaseIsOutOfReach checks that a built-in tool
// whose own store is out of reach says so, and that it runs again once
// the database is back.
func TestBuiltinToolWhenTheDatabaseIsOutOfReach(t *testing.T) {
	t.Parallel()
	var out atomic.Bool
	e := newEnv(t, envConfig{catalog: func(o *CatalogOptions) { o.Notes = outageNotes{o.Notes, &out} }})
	cs := e.connect(alice, "", nil, "")
	out.Store(true)
	if res := call(t, cs, "notes_read", map[string]any{"name": "n"}, nil); !res.IsError || text(res) != builtinUnavailableText {
		t.Errorf("notes_read with its store out of reach = %s, want %q", text(res), builtinUnavailableText)
	}
	out.Store(false)
	if res := call(t, cs, "notes_read", map[string]any{"name": "n"}, nil); !res.IsError || text(res) != "There is no note with this name." {
		t.Errorf("notes_read once the database is back = %s, want the tool's own answer", text(res))
	}
}
