//lint:file-ignore SA1019 Sampling is deprecated as of protocol 2026-07-28 (SEP-2577) but is still an input request of it: Usher passes it on while upstreams use it.

package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/jcs"
	"github.com/usherhq/usher/internal/seal"
)

// The audit kinds of multi round-trip requests (protocol 2026-07-28).
// An input request passed on is recorded as KindElicitationRequested,
// KindSamplingRequested or KindRootsRequested (Reasons name its id), one
// refused as
// KindRequestRefused, and a retry's answer as KindRequestAnswered: never
// the content of a request's answer.
const (
	// KindInputRequired: a round of a call ended asking its caller for
	// input; the call's execution awaits it, and the approval the round
	// used (ApprovalID) is unused again, for the round that completes.
	KindInputRequired = "input_required"
	// KindInputStateRefused: a retry's requestState (or its
	// inputResponses) was refused: not Usher's, altered or expired, or
	// another call's (Reasons say which). Nothing was sent upstream.
	KindInputStateRefused = "input_state_refused"
	// KindInputAbandoned: a call awaiting input was ended, failed, by the
	// sweep: no answer came before its request state expired (see
	// Sweeper).
	KindInputAbandoned = "input_abandoned"
)

// DefaultInputLifetime is the default of Options.InputLifetime.
const DefaultInputLifetime = 10 * time.Minute

// maxUpstreamState bounds an upstream's own requestState that Usher
// carries in its own; maxRequestState bounds Usher's, which holds it
// JSON-escaped (at most six bytes a byte) and base64url-encoded (4/3):
// about 256 KiB at most, well within a request body's default limit.
const (
	maxUpstreamState = 32 << 10
	maxRequestState  = 384 << 10
)

// newStateSealer is the sealer of Usher's request states, under a key
// derived from secret that every replica shares (and opening those the
// previous secrets sealed).
func newStateSealer(secret []byte, previous ...[]byte) (*seal.Sealer, error) {
	return seal.NewRotated(secret, previous, "usher/mcp/v1", "usher/mcp/request-state", maxRequestState)
}

// inputState is what Usher's requestState holds, sealed (encrypted and
// authenticated, with its expiry): the call the round belongs to, which a
// retry must be, the ids of the input requests passed on, and the
// upstream's own state, which only the upstream reads.
type inputState struct {
	Principal     string   `json:"p"`
	ClientID      string   `json:"c,omitempty"`
	RunID         string   `json:"r,omitempty"`
	Action        Action   `json:"a,omitempty"`
	Name          string   `json:"n"`
	ArgumentsHash string   `json:"h"`
	Key           string   `json:"k,omitempty"`
	Requests      []string `json:"q,omitempty"`
	Upstream      string   `json:"u,omitempty"`
}

// roundRequest is what a request brings of multi round-trip requests:
// whether its caller speaks them (protocol 2026-07-28), the capabilities
// it declared, and a retry's answers and state.
type roundRequest struct {
	modern    bool
	caps      *mcp.ClientCapabilities
	responses mcp.InputResponseMap
	state     string
}

// newRoundRequest is the roundRequest of a tools/call, prompts/get or
// resources/read with _meta meta, from a caller that declared caps.
func newRoundRequest(meta mcp.Meta, caps *mcp.ClientCapabilities, responses mcp.InputResponseMap, state string) roundRequest {
	return roundRequest{modern: sessionless(meta), caps: caps, responses: responses, state: state}
}

// round is what one round of a caller of protocol 2026-07-28 sends its
// upstream, carried in the context: the capabilities the caller declared
// (only elicitation, sampling and roots are passed on), and on a retry the
// caller's answers and the upstream's own state of the round before.
type round struct {
	caps      *mcp.ClientCapabilities
	responses mcp.InputResponseMap
	state     string
	// lifetime is how long the caller has to answer the round's input
	// requests (Options.InputLifetime).
	lifetime time.Duration
}

type roundKey struct{}

// roundOf returns the round of a request, if its caller speaks multi
// round-trip requests.
func roundOf(ctx context.Context) (*round, bool) {
	r, ok := ctx.Value(roundKey{}).(*round)
	return r, ok
}

// meta sets, on an upstream request's _meta, the capabilities the caller
// declared that an upstream may ask for (elicitation, sampling, roots), so
// that the upstream asks only for those.
func (r *round) meta(m mcp.Meta) mcp.Meta {
	if m == nil {
		m = mcp.Meta{}
	}
	caps := map[string]any{}
	if r.caps != nil && r.caps.Elicitation != nil {
		caps["elicitation"] = r.caps.Elicitation
	}
	if r.caps != nil && r.caps.Sampling != nil {
		caps["sampling"] = r.caps.Sampling
	}
	if r.caps != nil && r.caps.RootsV2 != nil {
		// The roots the caller gives are its answer to this round: the
		// upstream hears of no change to them.
		caps["roots"] = map[string]any{}
	}
	m[mcp.MetaKeyClientCapabilities] = caps
	return m
}

// inputAsk is an upstream's incomplete result: its input requests (empty,
// not nil, when it sent none) and its own state.
type inputAsk struct {
	requests mcp.InputRequestMap
	state    string
}

// askOf returns the inputAsk of an upstream's result that needs input.
func askOf(needsInput bool, requests mcp.InputRequestMap, state string) *inputAsk {
	if !needsInput {
		return nil
	}
	if requests == nil {
		requests = mcp.InputRequestMap{}
	}
	return &inputAsk{requests: requests, state: state}
}

// inputStateError is a retry's requestState or inputResponses refused;
// its text is for the caller.
type inputStateError struct{ reason, text string }

func (e *inputStateError) Error() string { return e.text }

// openRound checks what a request brings of multi round-trip requests and
// returns the round to send upstream (nil for a caller that does not
// speak them), or the refusal of a retry's state: one not sealed by
// Usher (or altered), expired, or of another call (another principal,
// client, run, action, name, arguments or idempotency key). A retry's
// answers are passed on only for the input requests of the round before;
// answers without a state start the request over, none passed on.
func (s *Server) openRound(call Call, key string, in roundRequest) (*round, *inputStateError) {
	if !in.modern {
		if in.state != "" || len(in.responses) > 0 {
			return nil, &inputStateError{"inputResponses or requestState from a caller of a protocol before 2026-07-28",
				"inputResponses and requestState belong to protocol 2026-07-28 and later; this request is of an earlier protocol."}
		}
		return nil, nil
	}
	r := &round{caps: in.caps, lifetime: s.opts.InputLifetime}
	if in.state == "" {
		// Answers without the state that asked for them answer nothing
		// Usher asked: the request starts over, so the upstream asks
		// again for the input it needs (the specification's way with a
		// missing input response). None of them is passed on.
		return r, nil
	}
	var st inputState
	if err := s.states.Open(in.state, s.opts.Now(), &st); err != nil {
		return nil, &inputStateError{"the request state is not Usher's, was altered, or has expired",
			"The requestState is not valid: it was not issued by this server, was altered, or has expired. " +
				"Send the request again without inputResponses and requestState to start over."}
	}
	if st.Principal != call.Principal || st.ClientID != call.ClientID || st.RunID != call.RunID || st.Action != call.Action ||
		st.Name != call.Tool || st.ArgumentsHash != call.ArgumentsHash || st.Key != key {
		return nil, &inputStateError{"the request state is another call's",
			"The requestState belongs to another request (another caller, tool, prompt, resource, arguments or idempotency key): " +
				"a retry must be exactly the request that was answered with it."}
	}
	r.state = st.Upstream
	if len(in.responses) > 0 {
		r.responses = mcp.InputResponseMap{}
		for _, id := range st.Requests {
			if v, ok := in.responses[id]; ok && v != nil {
				r.responses[id] = v
			}
		}
	}
	return r, nil
}

// refuseRound records the refusal of a retry's state, after its decision:
// nil, or the record's failure (see recordErr).
func (s *Server) refuseRound(ctx context.Context, ev Event, refusal *inputStateError) error {
	ev.Reasons = append(slices.Clip(ev.Reasons), refusal.reason)
	return s.recordErr(ctx, ev, KindInputStateRefused)
}

// recordAnswers records that a retry brings the caller's answers, one
// record each, without their content (an elicitation's action, accept,
// decline or cancel, is named).
func (s *Server) recordAnswers(ctx context.Context, ev Event, r *round) {
	for _, id := range slices.Sorted(maps.Keys(r.responses)) {
		reason := "input request " + truncate(id, 64) + ": answered"
		if el, ok := r.responses[id].(*mcp.ElicitResult); ok {
			reason += "; the user chose " + truncate(el.Action, 16)
		}
		e := ev
		e.Reasons, e.Outcome = []string{reason}, OutcomeSucceeded
		s.record(ctx, e, KindRequestAnswered)
	}
}

// inputKind returns the audit kind of an input request and whether the
// caller's capabilities let it be passed on: the specification forbids
// sending a request the caller did not declare.
func inputKind(ir mcp.InputRequest, caps *mcp.ClientCapabilities) (kind, method string, declared bool) {
	switch p := ir.(type) {
	case *mcp.ElicitParams:
		el := (*mcp.ElicitationCapabilities)(nil)
		if caps != nil {
			el = caps.Elicitation
		}
		if p.Mode == "url" {
			return KindElicitationRequested, "elicitation/create", el != nil && el.URL != nil
		}
		return KindElicitationRequested, "elicitation/create", el != nil && (el.Form != nil || el.URL == nil)
	case *mcp.CreateMessageParams:
		return KindSamplingRequested, "sampling/createMessage", caps != nil && caps.Sampling != nil
	case *mcp.CreateMessageWithToolsParams:
		ok := caps != nil && caps.Sampling != nil && (len(p.Tools) == 0 || caps.Sampling.Tools != nil)
		return KindSamplingRequested, "sampling/createMessage", ok
	case *mcp.ListRootsParams:
		return KindRootsRequested, "roots/list", caps != nil && caps.RootsV2 != nil
	}
	return "", "an unknown request", false
}

// inputNotRecorded: an input request or the end of its round could not
// be recorded, so nothing was passed on. Its text does not say why; the
// failure it wraps does, to errors.Is (store.ErrUnavailable).
type inputNotRecorded struct{ err error }

func (e inputNotRecorded) Error() string { return "the request for input could not be recorded" }
func (e inputNotRecorded) Unwrap() error { return e.err }

// askForInput passes an upstream's input requests on to the caller, for
// the call whose round ended with them: each request is checked against
// what the caller declared (any other fails the round, refused and
// audited) and audited before it goes out, the upstream's state is sealed
// in Usher's (see inputState), and the round's end is recorded before the
// caller is answered, durable for whichever replica takes the retry: the
// call's execution (key) awaits input and the approval the round used
// (ev.ApprovalID) is unused again. It returns Usher's requestState, or
// the text of the failure, which the caller is told.
func (s *Server) askForInput(ctx context.Context, call Call, ev Event, key string, r *round, ask *inputAsk, start time.Time) (string, error) {
	ids := slices.Sorted(maps.Keys(ask.requests))
	var refused []string
	for _, id := range ids {
		kind, method, declared := inputKind(ask.requests[id], r.caps)
		if declared {
			continue
		}
		refused = append(refused, method)
		e := ev
		e.Reasons = []string{"input request " + truncate(id, 64) + ": " + method + ": the caller did not declare it"}
		if kind == "" {
			e.Reasons[0] = "input request " + truncate(id, 64) + ": " + method + ": never passed on"
		}
		s.record(ctx, e, KindRequestRefused)
	}
	if len(refused) > 0 {
		slices.Sort(refused)
		return "", fmt.Errorf("the upstream server asked the caller for input it did not declare it gives (%s): the specification forbids passing it on, so nothing was asked",
			strings.Join(slices.Compact(refused), ", "))
	}
	if len(ask.state) > maxUpstreamState {
		return "", fmt.Errorf("the upstream server's request state is longer than %d bytes: it is not passed on", maxUpstreamState)
	}
	for _, id := range ids {
		kind, _, _ := inputKind(ask.requests[id], r.caps)
		e := ev
		e.Reasons, e.ArgumentsHash = []string{"input request " + truncate(id, 64)}, ""
		if b, err := jcs.Marshal(ask.requests[id]); err == nil {
			sum := sha256.Sum256(b)
			e.ArgumentsHash = hex.EncodeToString(sum[:])
		}
		if err := s.recordErr(ctx, e, kind); err != nil {
			return "", inputNotRecorded{err}
		}
	}
	state, err := s.states.Seal(inputState{
		Principal: call.Principal, ClientID: call.ClientID, RunID: call.RunID, Action: call.Action, Name: call.Tool,
		ArgumentsHash: call.ArgumentsHash, Key: key, Requests: ids, Upstream: ask.state,
	}, s.opts.Now().Add(s.opts.InputLifetime))
	if err == nil && len(state) > maxRequestState {
		err = errors.New("it is too long")
	}
	if err != nil {
		return "", fmt.Errorf("the request state could not be sealed: %w", err)
	}
	ev.Outcome, ev.Latency = OutcomeInputRequired, s.opts.Now().Sub(start)
	ev = s.stamp(ev, KindInputRequired)
	if key == "" && ev.ApprovalID == "" {
		err = s.opts.Auditor.Record(ctx, ev)
	} else {
		err = s.opts.Executions.AwaitInput(ctx, key, ev.ApprovalID, ev.At, ev)
	}
	if err != nil {
		s.log.ErrorContext(ctx, "mcpserver: recording a round that asks for input failed", "tool", call.Tool, "err", err)
		return "", inputNotRecorded{err}
	}
	return state, nil
}

// incompleteTool is the incomplete tools/call result that passes input
// requests on, with Usher's requestState and "resultType":
// "input_required", set through the SDK's decoding as completeResult
// sets "complete".
func incompleteTool(requests mcp.InputRequestMap, state string) *mcp.CallToolResult {
	tmpl, err := incompleteTemplate()
	if err != nil {
		return errorResult("The upstream server asked for input, which this server cannot pass on.")
	}
	out := *tmpl
	out.Content, out.InputRequests, out.RequestState = []mcp.Content{}, requests, state
	return &out
}

// incompleteTemplate is an empty result whose resultType is
// "input_required".
var incompleteTemplate = sync.OnceValues(func() (*mcp.CallToolResult, error) {
	var r mcp.CallToolResult
	if err := json.Unmarshal([]byte(`{"content":[],"resultType":"input_required"}`), &r); err != nil {
		return nil, err
	}
	if !r.NeedsInput() {
		return nil, errors.New("the SDK does not decode input_required")
	}
	return &r, nil
})

// incompleteFeature is res (a prompts/get or resources/read result
// without content) with its input requests, Usher's requestState and
// "resultType": "input_required", through the SDK's decoding.
func incompleteFeature[T any, P interface {
	*T
	mcp.Result
}](res P, requests mcp.InputRequestMap, state string) (P, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m["inputRequests"], err = json.Marshal(requests); err != nil {
		return nil, err
	}
	m["requestState"], _ = json.Marshal(state)
	m["resultType"] = json.RawMessage(`"input_required"`)
	if b, err = json.Marshal(m); err != nil {
		return nil, err
	}
	out := P(new(T))
	if err := json.Unmarshal(b, out); err != nil {
		return nil, err
	}
	return out, nil
}
