package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store/storetest"
)

func userToken(t testing.TB, s *server, sub string) string {
	t.Helper()
	tok, err := s.cli(t, "token", "user", "--sub", sub)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func countType(events []map[string]any, typ string) int {
	n := 0
	for _, e := range events {
		if e["type"] == typ {
			n++
		}
	}
	return n
}

// TestAssistantLifecycle walks a conversation with the demo model through
// the embedded default: an unattended tool, a call that pauses for an
// approval, the decision, the retried call running once, completion, and
// the closed run refusing more.
func TestAssistantLifecycle(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")

	code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"Groceries"}`)
	if code != 201 || run["status"] != "InProgress" || run["title"] != "Groceries" {
		t.Fatalf("create = %d %v", code, run)
	}
	id := run["runId"].(string)
	base := s.url + "/api/assistant/runs/" + id

	code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"call notes_list"}`)
	if code != 200 || body["status"] != "completed" || !strings.Contains(fmt.Sprint(body["reply"]), "notes_list") {
		t.Fatalf("unattended tool turn = %d %v", code, body)
	}

	code, body = apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"call notes_write {\"name\":\"todo\",\"body\":\"buy milk\"}"}`)
	if code != 202 || body["status"] != "awaiting_approval" {
		t.Fatalf("approval turn = %d %v", code, body)
	}
	msgs := body["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)["data"].(map[string]any)
	approval := last["approval"].(map[string]any)
	if last["status"] != "approval_pending" || approval["status"] != "pending" || !strings.Contains(approval["url"].(string), approval["id"].(string)) {
		t.Fatalf("the paused call's result = %v", last)
	}
	if code, r := apitest.Call(t, "GET", base, alice, ""); code != 200 || r["run"].(map[string]any)["status"] != "AwaitingApproval" {
		t.Fatalf("run while paused = %d %v", code, r)
	}

	// The decision requeues the run; the runner retries the exact call.
	code, _ = apitest.Call(t, "POST", s.url+"/api/approvals/"+approval["id"].(string)+"/decision", alice, `{"decision":"approve"}`)
	if code != 200 {
		t.Fatalf("decision = %d", code)
	}
	testenv.WaitFor(t, 20*time.Second, func() bool {
		ev := apitest.Events(t, s.url, alice, id)
		return countType(ev, "agent.turn.end") == 2
	})
	code, body = apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"call notes_read {\"name\":\"todo\"}"}`)
	if code != 200 || !strings.Contains(fmt.Sprint(body["reply"]), "buy milk") {
		t.Fatalf("reading the note = %d %v", code, body)
	}

	events := apitest.Events(t, s.url, alice, id)
	if n, m := countType(events, "agent.turn.start"), countType(events, "agent.turn.end"); n != 3 || m != 3 {
		t.Errorf("turn starts/ends = %d/%d, want 3/3", n, m)
	}
	if n := countType(events, "agent.system_prompt"); n != 3 {
		t.Errorf("system prompt records = %d, want one per turn", n)
	}
	for _, e := range events {
		if e["type"] == "agent.system_prompt" || e["type"] == "agent.runtime_context" {
			raw, _ := json.Marshal(e["data"])
			if strings.Contains(string(raw), "notes_") || strings.Contains(string(raw), "Usher") {
				t.Errorf("%s holds content: %s", e["type"], raw)
			}
		}
	}
	// The write ran once: one execution in the audit log.
	export, err := s.cli(t, "audit", "export")
	if err != nil {
		t.Fatal(err)
	}
	executed := 0
	for line := range strings.Lines(export) {
		if strings.Contains(line, `"notes_write"`) && strings.Contains(line, `"outcome":"succeeded"`) {
			executed++
		}
	}
	if executed != 1 {
		t.Errorf("notes_write executions in the audit log = %d, want 1", executed)
	}

	code, body = apitest.Call(t, "POST", base+"/complete", alice, "")
	if code != 200 || body["status"] != "Completed" {
		t.Fatalf("complete = %d %v", code, body)
	}
	if code, body := apitest.Call(t, "POST", base+"/messages", alice, `{"content":"more"}`); code != 409 || apitest.ErrorCode(body) != "operator_run_closed" {
		t.Errorf("message to a completed run = %d %v", code, body)
	}
	if code, body := apitest.Call(t, "POST", base+"/complete", alice, ""); code != 409 {
		t.Errorf("complete twice = %d %v", code, body)
	}
	if code, _ := apitest.Call(t, "DELETE", base, alice, ""); code != 204 {
		t.Errorf("delete = %d", code)
	}
	if code, _ := apitest.Call(t, "GET", base, alice, ""); code != 404 {
		t.Errorf("get after delete = %d", code)
	}
}

// balancer is a round-robin reverse proxy in front of replicas, keeping
// the Host header as a load balancer does. It reads a request's body whole
// before it forwards the request, as nginx does by default: Go's HTTP/1
// server closes a request's body once its handler begins the response,
// and the proxy's transport reads the body once more after the declared
// length, to check that it ends there. A replica that had answered before
// that read (a response stream's headers) made it fail, and the transport
// closed its connection to the replica, cutting the stream
// (golang/go#40747).
type balancer struct {
	url      string
	proxy    *httputil.ReverseProxy
	mu       sync.Mutex
	backends []*url.URL
	next     int
}

func newBalancer(t *testing.T) *balancer {
	lb := &balancer{}
	lb.proxy = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		lb.mu.Lock()
		target := lb.backends[lb.next%len(lb.backends)]
		lb.next++
		lb.mu.Unlock()
		r.SetURL(target)
		r.Out.Host = r.In.Host
	}}
	srv := httptest.NewServer(http.HandlerFunc(lb.serve))
	t.Cleanup(srv.Close)
	lb.url = srv.URL
	return lb
}

// serve forwards r once its body is read (see balancer).
func (lb *balancer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	lb.proxy.ServeHTTP(w, r)
}

func (lb *balancer) set(urls ...string) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.backends = nil
	for _, u := range urls {
		p, _ := url.Parse(u)
		lb.backends = append(lb.backends, p)
	}
}

// TestAssistantRehydration checks what a fresh model session is given:
// the system prompt, the latest 24 messages of history, and the new
// message, with a tool call never separated from its result.
func TestAssistantRehydration(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("ok")
	s := startServer(t, ms.UsherEnv())
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	base := s.url + "/api/assistant/runs/" + run["runId"].(string)

	send := func(text string) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"content": text})
		if code, r := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, string(body)); code != 200 || r["status"] != "completed" {
			t.Fatalf("turn %q = %d %v", text, code, r)
		}
	}
	lastRequest := func() modeltest.RecordedRequest {
		reqs := ms.Requests()
		return reqs[len(reqs)-1]
	}
	// 20 turns: 40 messages. The 21st turn sees the latest 24 of them.
	for i := 1; i <= 20; i++ {
		send(fmt.Sprintf("message %d", i))
	}
	send("message 21")
	req := lastRequest()
	if len(req.Messages) != 26 {
		t.Fatalf("after 40 messages the model got %d messages, want 1 + 24 + 1", len(req.Messages))
	}
	if req.Messages[0].Role != "system" || req.Messages[1].Content != "message 9" || req.Messages[25].Content != "message 21" {
		t.Fatalf("window = %q ... %q, want message 9 ... message 21", req.Messages[1].Content, req.Messages[25].Content)
	}

	// A turn with a tool call: user, assistant call, tool result,
	// assistant answer (messages 43 to 46).
	ms.ReplyToolCalls(model.ToolCall{ID: "call-1", Name: "notes_list", Arguments: json.RawMessage(`{}`)})
	ms.Reply("listed")
	send("list my notes")
	// Turns of two messages until the user message is the 67th: its
	// window (43..66) holds the whole group; the 69th's (45..68) would
	// start at the tool result, which is dropped.
	for i := 47; i < 67; i += 2 {
		send(fmt.Sprintf("filler %d", i))
	}
	send("message 67")
	req = lastRequest()
	if len(req.Messages) != 26 || req.Messages[1].Content != "list my notes" ||
		len(req.Messages[2].ToolCalls) != 1 || req.Messages[3].Role != "tool" || req.Messages[3].ToolCallID != "call-1" {
		t.Fatalf("window with the whole group = %d messages: %+v", len(req.Messages), req.Messages[:5])
	}
	send("message 69")
	req = lastRequest()
	if len(req.Messages) != 25 || req.Messages[1].Role != "assistant" || req.Messages[1].Content != "listed" {
		t.Fatalf("window cut inside a group = %d messages, first %+v; want the orphan result dropped", len(req.Messages), req.Messages[1])
	}
	for _, m := range req.Messages {
		if m.Role == "tool" {
			t.Errorf("orphan tool result in the window: %+v", m)
		}
	}
	// The provider gets only what Chat Completions defines.
	for _, bad := range []string{`"seq"`, `"status"`, `"approval"`, `"structured"`} {
		if strings.Contains(string(req.Body), bad) {
			t.Errorf("the model request carries an internal field %s", bad)
		}
	}
}

// TestAssistantBadInput sends what a careless or hostile client might.
func TestAssistantBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_ASSISTANT_MAX_MESSAGE_BYTES": "1000"})
	alice, bob := userToken(t, s, "alice"), userToken(t, s, "bob")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"mine"}`)
	base := s.url + "/api/assistant/runs/" + run["runId"].(string)

	for _, tc := range []struct {
		name, method, url, token, body string
		code                           int
		errCode                        string
	}{
		{"no token", "GET", base, "", "", 401, ""},
		{"unknown run", "GET", s.url + "/api/assistant/runs/run_nope", alice, "", 404, "not_found"},
		{"another user's run", "GET", base, bob, "", 404, "not_found"},
		{"another user's messages", "POST", base + "/messages", bob, `{"content":"hi"}`, 404, "not_found"},
		{"another user's events", "GET", base + "/events", bob, "", 404, "not_found"},
		{"another user's completion", "POST", base + "/complete", bob, "", 404, "not_found"},
		{"another user's delete", "DELETE", base, bob, "", 404, "not_found"},
		{"malformed JSON", "POST", base + "/messages", alice, `{"content":`, 400, "invalid_json"},
		{"unknown field", "POST", base + "/messages", alice, `{"content":"hi","role":"system"}`, 400, "invalid_json"},
		{"two objects", "POST", base + "/messages", alice, `{"content":"hi"}{}`, 400, "invalid_json"},
		{"no content", "POST", base + "/messages", alice, `{}`, 400, "invalid_message"},
		{"empty content", "POST", base + "/messages", alice, `{"content":"  "}`, 400, "invalid_message"},
		{"huge message", "POST", base + "/messages", alice, `{"content":"` + strings.Repeat("a", 2000) + `"}`, 413, "message_too_large"},
		{"huge body", "POST", base + "/messages", alice, `{"content":"` + strings.Repeat("a", 1<<20) + `"}`, 413, ""},
		{"bad wait", "POST", base + "/messages?wait=forever", alice, `{"content":"hi"}`, 400, "invalid_wait"},
		{"long wait", "POST", base + "/messages?wait=1h", alice, `{"content":"hi"}`, 400, "invalid_wait"},
		{"take zero", "GET", base + "/messages?take=0", alice, "", 400, "invalid_query"},
		{"take huge", "GET", base + "/messages?take=100000", alice, "", 400, "invalid_query"},
		{"before text", "GET", base + "/messages?before=abc", alice, "", 400, "invalid_query"},
		{"before and after", "GET", base + "/messages?before=5&after=1", alice, "", 400, "invalid_query"},
		{"negative after", "GET", base + "/events?after=-1", alice, "", 400, "invalid_query"},
		{"tiny maxBytes", "GET", base + "/messages?maxBytes=1", alice, "", 400, "invalid_query"},
		{"title with control characters", "POST", s.url + "/api/assistant/runs", alice, `{"title":"a\u0007b"}`, 400, "invalid_title"},
		{"unknown route", "GET", s.url + "/api/assistant/nothing", alice, "", 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := apitest.Call(t, tc.method, tc.url, tc.token, tc.body)
			if code != tc.code || (tc.errCode != "" && apitest.ErrorCode(body) != tc.errCode) {
				t.Errorf("%s %s = %d %v, want %d %s", tc.method, tc.url, code, body, tc.code, tc.errCode)
			}
		})
	}
	// Nothing of the refused requests was stored.
	if code, r := apitest.Call(t, "GET", base, alice, ""); code != 200 || r["run"].(map[string]any)["messageCount"].(float64) != 0 {
		t.Errorf("run after refused messages = %d %v", code, r)
	}
	// A broker token speaks for a user to the MCP server, not to the API.
	mcpTok, err := s.cli(t, "token", "mcp", "--sub", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := apitest.Call(t, "GET", s.url+"/api/assistant/runs", mcpTok, ""); code != 401 && code != 403 {
		t.Errorf("broker token on the API = %d, want 401 or 403", code)
	}
}

// TestAssistantLimitAndIdempotency checks the active-run limit and the
// Idempotency-Key header.
func TestAssistantLimitAndIdempotency(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")
	code, first := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"one"}`, "Idempotency-Key", "k-1")
	if code != 201 {
		t.Fatalf("create = %d %v", code, first)
	}
	code, again := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"one"}`, "Idempotency-Key", "k-1")
	if code != 200 || again["runId"] != first["runId"] {
		t.Fatalf("retried create = %d %v, want the first run", code, again)
	}
	for i := 2; i <= 5; i++ {
		if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, ""); code != 201 {
			t.Fatalf("create %d = %d %v", i, code, body)
		}
	}
	code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	if code != 429 || apitest.ErrorCode(body) != "too_many_active_runs" {
		t.Fatalf("6th active run = %d %v", code, body)
	}
	// The retry of an existing run still answers.
	if code, _ := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "", "Idempotency-Key", "k-1"); code != 200 {
		t.Errorf("retried create at the limit = %d", code)
	}
	if code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs", alice, ""); code != 200 || len(body["runs"].([]any)) != 5 {
		t.Errorf("list = %d %v", code, body)
	}
	// Completing one frees a place.
	if code, _ := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+first["runId"].(string)+"/complete", alice, ""); code != 200 {
		t.Fatal("complete failed")
	}
	if code, _ := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, ""); code != 201 {
		t.Errorf("create after completing one = %d", code)
	}
}

// TestAssistantReplicasOnPostgreSQL runs two replicas on one database: the
// active-run limit holds across them, and concurrent messages to one run,
// through both, never overlap turns.
func TestAssistantReplicasOnPostgreSQL(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("ok")
	// The replicas sit behind one load balancer, whose URL is their public
	// URL: one issuer, one MCP resource, whichever replica answers.
	lb := newBalancer(t)
	env := ms.UsherEnv("USHER_BROKER_KEY_ENCRYPTION_KEY", "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=",
		"USHER_SERVER_PUBLIC_URL", lb.url)
	addrA, addrB := testenv.FreeAddr(t), testenv.FreeAddr(t)
	a := startServer(t, env, "--database-url", dbURL, "--addr", addrA)
	b := startServer(t, env, "--database-url", dbURL, "--addr", addrB)
	lb.set("http://"+addrA, "http://"+addrB)
	// Straight to each replica, so that both serve the requests below.
	a.url, b.url = "http://"+addrA, "http://"+addrB
	tok, err := a.cli(t, "token", "user", "--sub", "carol", "--database-url", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	tokA, tokB := tok, tok

	// 20 concurrent creates, half through each replica: exactly 5.
	var mu sync.Mutex
	created, limited := 0, 0
	var wg sync.WaitGroup
	for i := range 20 {
		s, tok := a, tokA
		if i%2 == 1 {
			s, tok = b, tokB
		}
		wg.Go(func() {
			code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs", tok, "")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case code == 201:
				created++
			case code == 429 && apitest.ErrorCode(body) == "too_many_active_runs":
				limited++
			default:
				t.Errorf("create = %d %v", code, body)
			}
		})
	}
	wg.Wait()
	if created != 5 || limited != 15 {
		t.Fatalf("20 concurrent creates over two replicas: %d created, %d limited; want 5 and 15", created, limited)
	}

	_, list := apitest.Call(t, "GET", a.url+"/api/assistant/runs", tokA, "")
	id := list["runs"].([]any)[0].(map[string]any)["runId"].(string)
	for i := range 10 {
		s, tok := a, tokA
		if i%2 == 1 {
			s, tok = b, tokB
		}
		wg.Go(func() {
			body, _ := json.Marshal(map[string]string{"content": fmt.Sprintf("concurrent %d", i)})
			if code, r := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+id+"/messages", tok, string(body)); code != 202 {
				t.Errorf("post = %d %v", code, r)
			}
		})
	}
	wg.Wait()
	var events []map[string]any
	deadline := time.Now().Add(60 * time.Second)
	for events = apitest.Events(t, a.url, tokA, id); countType(events, "agent.turn.end") < 10; events = apitest.Events(t, a.url, tokA, id) {
		if time.Now().After(deadline) {
			raw, _ := json.MarshalIndent(events, "", " ")
			t.Fatalf("10 turns did not end within a minute:\n%s", raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Turns never overlap: starts and ends alternate, each user message
	// is answered by exactly one turn.
	open := false
	answered := map[float64]int{}
	for _, e := range events {
		switch e["type"] {
		case "agent.turn.start":
			if open {
				t.Fatalf("a turn started while another was open: %v", e)
			}
			open = true
			answered[e["data"].(map[string]any)["messageSeq"].(float64)]++
		case "agent.turn.end":
			if !open {
				t.Fatalf("a turn ended that had not started: %v", e)
			}
			open = false
		}
	}
	if len(answered) != 10 {
		t.Errorf("%d user messages answered, want 10", len(answered))
	}
	for seq, n := range answered {
		if n != 1 {
			t.Errorf("message %v answered by %d turns", seq, n)
		}
	}
	if n := countType(events, "message.assistant"); n != 10 {
		t.Errorf("%d assistant messages, want 10", n)
	}
}

// metric reads one unlabelled value from /metrics.
func metric(t *testing.T, s *server, name string) float64 {
	t.Helper()
	_, body := get(t, s.url+"/metrics", "")
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestAssistantIdleAndHeld parks quiet runs Idle and wakes them with a
// message; a run waiting for an approval is not parked, and its MCP session
// is held until the run goes on; quiet sessions are released.
func TestAssistantIdleAndHeld(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{
		"USHER_ASSISTANT_IDLE_AFTER": "1s", "USHER_ASSISTANT_SWEEP_INTERVAL": "1s", "USHER_ASSISTANT_HOLD_IDLE": "1s",
	})
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	base := s.url + "/api/assistant/runs/" + id
	if code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"call notes_list"}`); code != 200 {
		t.Fatalf("turn = %d %v", code, body)
	}
	testenv.WaitFor(t, 20*time.Second, func() bool { return apitest.Run(t, s.url, alice, id)["status"] == "Idle" })
	testenv.WaitFor(t, 20*time.Second, func() bool { return metric(t, s, "usher_assistant_held_sessions") == 0 })

	// A message wakes it.
	code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"hello again"}`)
	if code != 200 || body["status"] != "completed" || body["run"].(map[string]any)["status"] != "InProgress" {
		t.Fatalf("message to an Idle run = %d %v", code, body)
	}

	// A run waiting for an approval stays, and so does its session.
	_, other := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	otherID := other["runId"].(string)
	code, body = apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+otherID+"/messages?wait=30s", alice, `{"content":"call notes_write {\"name\":\"a\",\"body\":\"b\"}"}`)
	if code != 202 || body["status"] != "awaiting_approval" {
		t.Fatalf("approval turn = %d %v", code, body)
	}
	time.Sleep(3 * time.Second) // three sweeps, each past the idle and hold periods
	if st := apitest.Run(t, s.url, alice, otherID)["status"]; st != "AwaitingApproval" {
		t.Errorf("a run waiting for an approval went %v", st)
	}
	if n := metric(t, s, "usher_assistant_held_sessions"); n != 1 {
		t.Errorf("held sessions while an approval is armed = %v, want 1", n)
	}
	events := apitest.Events(t, s.url, alice, otherID)
	var delivery []string
	for _, e := range events {
		if e["type"] == "agent.runtime_context" {
			delivery = append(delivery, e["data"].(map[string]any)["delivery"].(string))
		}
	}
	if len(delivery) != 1 || delivery[0] != "fresh" {
		t.Errorf("deliveries = %v", delivery)
	}
}

// TestAssistantModelFailures checks that a failing model fails the turn
// visibly and leaves the conversation usable, and that a passing failure
// is retried.
func TestAssistantModelFailures(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	base := s.url + "/api/assistant/runs/" + run["runId"].(string)

	ms.ReplyError(401)
	code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"hi"}`)
	if code != 200 || body["status"] != "failed" || !strings.HasPrefix(fmt.Sprint(body["error"]), "HTTP 401: the model provider rejected the API key") || strings.Contains(fmt.Sprint(body["error"]), "Tried") {
		t.Fatalf("turn with a refused model = %d %v", code, body)
	}
	if strings.Contains(fmt.Sprint(body), "test-key") {
		t.Errorf("the API key leaked: %v", body)
	}
	ms.ReplyError(503)
	ms.Reply("back again")
	code, body = apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"still there?"}`)
	if code != 200 || body["status"] != "completed" || body["reply"] != "back again" {
		t.Fatalf("turn after a passing failure = %d %v", code, body)
	}
	if n := len(ms.Requests()); n != 3 {
		t.Errorf("model requests = %d, want 3 (the 401 once, the 503 retried)", n)
	}
}

// TestAssistantSlicesAndSteps checks that a turn yields the run after
// max_tool_calls_per_slice calls and resumes, and stops at max_steps.
func TestAssistantSlicesAndSteps(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv("USHER_ASSISTANT_MAX_TOOL_CALLS_PER_SLICE", "1", "USHER_ASSISTANT_MAX_STEPS", "4"))
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	base := s.url + "/api/assistant/runs/" + id

	for i := range 3 {
		ms.ReplyToolCalls(model.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "notes_list", Arguments: json.RawMessage(`{}`)})
	}
	ms.Reply("three lists")
	code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"list thrice"}`)
	if code != 200 || body["status"] != "completed" || body["reply"] != "three lists" {
		t.Fatalf("sliced turn = %d %v", code, body)
	}
	events := apitest.Events(t, s.url, alice, id)
	if countType(events, "agent.turn.start") != 1 || countType(events, "agent.turn.end") != 1 || countType(events, "message.tool") != 3 {
		t.Errorf("a sliced turn is still one turn: starts %d, ends %d, tool results %d",
			countType(events, "agent.turn.start"), countType(events, "agent.turn.end"), countType(events, "message.tool"))
	}

	for i := range 5 {
		ms.ReplyToolCalls(model.ToolCall{ID: fmt.Sprintf("d%d", i), Name: "notes_list", Arguments: json.RawMessage(`{}`)})
	}
	code, body = apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"loop"}`)
	if code != 200 || body["status"] != "failed" || !strings.Contains(fmt.Sprint(body["error"]), "4 model steps") {
		t.Fatalf("turn over max_steps = %d %v", code, body)
	}
}

// TestAssistantSliceBudget: with assistant.max_slices 3, a turn that
// would take five slices stops the run, failed, at the third, with the
// reason in the turn's end and the log; GET …/steps lists the three.
func TestAssistantSliceBudget(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv("USHER_ASSISTANT_MAX_TOOL_CALLS_PER_SLICE", "1", "USHER_ASSISTANT_MAX_SLICES", "3"))
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	base := s.url + "/api/assistant/runs/" + id
	for i := range 5 {
		ms.ReplyToolCalls(model.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "notes_list", Arguments: json.RawMessage(`{}`)})
	}
	code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"list for ever"}`)
	if code != 200 || body["status"] != "failed" || !strings.Contains(fmt.Sprint(body["error"]), "limit of 3 slices") {
		t.Fatalf("turn over max_slices = %d %v", code, body)
	}
	events := apitest.Events(t, s.url, alice, id)
	if countType(events, "agent.run.budget") != 1 || countType(events, "agent.step.end") != 3 || countType(events, "message.tool") != 3 {
		t.Errorf("budget events %d, step ends %d, tool results %d; want 1, 3, 3",
			countType(events, "agent.run.budget"), countType(events, "agent.step.end"), countType(events, "message.tool"))
	}
	code, body = apitest.Call(t, "GET", base+"/steps", alice, "")
	if steps, _ := body["steps"].([]any); code != 200 || len(steps) != 3 {
		t.Errorf("GET steps = %d %v, want the 3 steps", code, body)
	}
	if code, body = apitest.Call(t, "GET", base, alice, ""); code != 200 || fmt.Sprint(body["run"].(map[string]any)["status"]) != "Failed" {
		t.Errorf("the run = %d %v, want Failed", code, body)
	}
}

// TestAssistantQueuedMessages fills the only turn slot of a process, then
// sends two messages to another run, which wait unclaimed: when the slot
// frees, the scheduler claims that run (it was woken while every slot was
// taken), its turn answers the first message, and the second gets a turn
// of its own although it arrived before the claim.
func TestAssistantQueuedMessages(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("ok")
	// No sweep comes to the rescue within the test.
	s := startServer(t, ms.UsherEnv("USHER_ASSISTANT_MAX_CONCURRENCY", "1", "USHER_ASSISTANT_SWEEP_INTERVAL", "10m"))
	alice := userToken(t, s, "alice")
	release := ms.Hold()
	defer release()

	_, busy := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"message":"take the slot"}`)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := ms.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	for _, text := range []string{"first", "second"} {
		body, _ := json.Marshal(map[string]string{"content": text})
		if code, r := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+id+"/messages", alice, string(body)); code != 202 {
			t.Fatalf("post %q = %d %v", text, code, r)
		}
	}
	if n := countType(apitest.Events(t, s.url, alice, id), "agent.turn.start"); n != 0 {
		t.Fatalf("%d turns started while the only slot was taken", n)
	}
	release()

	var events []map[string]any
	testenv.WaitFor(t, 20*time.Second, func() bool {
		events = apitest.Events(t, s.url, alice, id)
		return countType(events, "agent.turn.end") == 2
	})
	var answered []float64
	for _, e := range events {
		if e["type"] == "agent.turn.start" {
			answered = append(answered, e["data"].(map[string]any)["messageSeq"].(float64))
		}
	}
	if len(answered) != 2 || answered[0] != 1 || answered[1] != 2 {
		t.Errorf("turns answered messages %v, want [1 2]", answered)
	}
	if n := countType(apitest.Events(t, s.url, alice, busy["runId"].(string)), "agent.turn.end"); n != 1 {
		t.Errorf("the first run's turn ended %d times, want once", n)
	}
}

// TestAssistantRestartMidTurn stops the server while the model holds its
// reply and starts it again on the same data: the turn resumes at once and
// ends, with nothing lost or doubled.
func TestAssistantRestartMidTurn(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	addr := testenv.FreeAddr(t)
	dataDir := t.TempDir()
	env := ms.UsherEnv()
	s1 := startServerIn(t, dataDir, env, "--addr", addr)
	alice := userToken(t, s1, "alice")
	release := ms.Hold()
	defer release()
	ms.Reply("after the restart")
	id := createHeld(t, ms, s1.url, alice, "hello")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := s1.shutdown(); err != nil {
		t.Fatalf("shutdown: %v\n%s", err, s1.stderr)
	}
	if err := ms.WaitHeld(ctx, 0); err != nil {
		t.Fatal(err)
	}
	release()

	s2 := startServerIn(t, dataDir, env, "--addr", addr)
	var events []map[string]any
	testenv.WaitFor(t, 20*time.Second, func() bool {
		events = apitest.Events(t, s2.url, alice, id)
		return countType(events, "agent.turn.end") == 1
	})
	if countType(events, "message.user") != 1 || countType(events, "agent.turn.start") != 1 || countType(events, "message.assistant") != 1 {
		t.Errorf("events after the restart: %v", events)
	}
}

// TestAssistantPaging reads a conversation page by page in both
// directions: every message once, in order, and no page starts with a tool
// result or ends between a call and its results.
func TestAssistantPaging(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("ok")
	s := startServer(t, ms.UsherEnv())
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	base := s.url + "/api/assistant/runs/" + id
	for i := range 12 {
		if i%3 == 0 {
			ms.ReplyToolCalls(
				model.ToolCall{ID: fmt.Sprintf("a%d", i), Name: "notes_list", Arguments: json.RawMessage(`{}`)},
				model.ToolCall{ID: fmt.Sprintf("b%d", i), Name: "notes_list", Arguments: json.RawMessage(`{}`)})
		}
		body, _ := json.Marshal(map[string]string{"content": fmt.Sprintf("m%d %s", i, strings.Repeat("x", 300))})
		if code, r := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, string(body)); code != 200 {
			t.Fatalf("turn = %d %v", code, r)
		}
	}
	var all []float64
	for _, e := range apitest.Events(t, s.url, alice, id) {
		if strings.HasPrefix(e["type"].(string), "message.") {
			all = append(all, e["seq"].(float64))
		}
	}
	checkPage := func(page []any) {
		t.Helper()
		if len(page) == 0 {
			t.Fatal("empty page")
		}
		if page[0].(map[string]any)["type"] == "message.tool" {
			t.Errorf("a page starts with a tool result: %v", page[0])
		}
	}
	for _, take := range []int{1, 2, 3, 5} {
		// Backwards from the end.
		var got []float64
		url := fmt.Sprintf("%s/messages?take=%d", base, take)
		for {
			code, body := apitest.Call(t, "GET", url, alice, "")
			if code != 200 {
				t.Fatalf("page = %d %v", code, body)
			}
			page := body["messages"].([]any)
			checkPage(page)
			var seqs []float64
			for _, m := range page {
				seqs = append(seqs, m.(map[string]any)["seq"].(float64))
			}
			got = append(seqs, got...)
			if more, _ := body["hasMore"].(bool); !more {
				break
			}
			url = fmt.Sprintf("%s/messages?take=%d&before=%d", base, take, int64(seqs[0]))
		}
		if fmt.Sprint(got) != fmt.Sprint(all) {
			t.Errorf("take=%d backwards = %v, want %v", take, got, all)
		}
		// Forwards from the start.
		got = nil
		after := 0.0
		for {
			code, body := apitest.Call(t, "GET", fmt.Sprintf("%s/messages?take=%d&after=%d", base, take, int64(after)), alice, "")
			if code != 200 {
				t.Fatalf("page = %d %v", code, body)
			}
			page := body["messages"].([]any)
			checkPage(page)
			for _, m := range page {
				got = append(got, m.(map[string]any)["seq"].(float64))
			}
			after = got[len(got)-1]
			if more, _ := body["hasMore"].(bool); !more {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(all) {
			t.Errorf("take=%d forwards = %v, want %v", take, got, all)
		}
	}
	// A byte bound cuts at a group boundary and keeps at least one group.
	code, body := apitest.Call(t, "GET", base+"/messages?take=50&maxBytes=1024", alice, "")
	if code != 200 || len(body["messages"].([]any)) == 0 || !body["hasMore"].(bool) {
		t.Errorf("byte-bounded page = %d %v", code, body)
	}
	// The run view: the first and last windows, without overlap.
	code, body = apitest.Call(t, "GET", base, alice, "")
	first, last := body["first"].([]any), body["last"].([]any)
	if code != 200 || len(first)+len(last) != len(all) || body["gap"] != false {
		t.Errorf("run view: %d first + %d last, gap %v; want all %d messages", len(first), len(last), body["gap"], len(all))
	}
}

// writersPolicy lets members of "writers" write notes unattended; everyone
// else's writes wait for an approval (nothing matched).
const writersPolicy = `
@id("list")
@outcome("allow")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_list")
when { resource.server == "builtin" };

@id("writers-write")
@outcome("allow")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_write")
when { resource.server == "builtin" && principal.groups.contains("writers") };
`

// TestAssistantCallsCarryTheSendersGroups checks that a turn calls tools
// with the groups its message was sent with: a group rule applies to the
// assistant's calls exactly as to a direct MCP client's, and a held MCP
// session is not reused for a message sent with other groups.
func TestAssistantCallsCarryTheSendersGroups(t *testing.T) {
	t.Parallel()
	policyFile := t.TempDir() + "/policy.cedar"
	if err := writeTestFile(policyFile, writersPolicy); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, map[string]string{"USHER_POLICY_FILE": policyFile})
	writer, err := s.cli(t, "token", "user", "--sub", "dana", "--group", "staff", "--group", "writers")
	if err != nil {
		t.Fatal(err)
	}
	plain := userToken(t, s, "dana") // the same user, without the groups
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", writer, "")
	base := s.url + "/api/assistant/runs/" + run["runId"].(string)

	code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", writer, `{"content":"call notes_write {\"name\":\"a\",\"body\":\"by a writer\"}"}`)
	if code != 200 || body["status"] != "completed" {
		t.Fatalf("a writer's write = %d %v, want it to run unattended", code, body)
	}
	code, body = apitest.Call(t, "POST", base+"/messages?wait=30s", plain, `{"content":"call notes_write {\"name\":\"b\",\"body\":\"without the group\"}"}`)
	if code != 202 || body["status"] != "awaiting_approval" {
		t.Fatalf("the same user's write without the group = %d %v, want an approval", code, body)
	}
	if _, err := s.cli(t, "token", "user", "--sub", "dana", "--group", "<script>"); err == nil {
		t.Error("token user took a group that is not a name")
	}
}

// TestAssistantMessageIdempotencyAcrossReplicas posts one message with one
// Idempotency-Key twelve times at once, through two replicas on one
// PostgreSQL: one message is stored, it gets one turn, and every post
// answers with it.
func TestAssistantMessageIdempotencyAcrossReplicas(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	ms := modeltest.NewServer(t)
	ms.SetDefaultReply("ok")
	lb := newBalancer(t)
	env := ms.UsherEnv("USHER_BROKER_KEY_ENCRYPTION_KEY", "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=",
		"USHER_SERVER_PUBLIC_URL", lb.url)
	addrA, addrB := testenv.FreeAddr(t), testenv.FreeAddr(t)
	a := startServer(t, env, "--database-url", dbURL, "--addr", addrA)
	b := startServer(t, env, "--database-url", dbURL, "--addr", addrB)
	lb.set("http://"+addrA, "http://"+addrB)
	a.url, b.url = "http://"+addrA, "http://"+addrB
	tok, err := a.cli(t, "token", "user", "--sub", "dave", "--database-url", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	code, run := apitest.Call(t, "POST", a.url+"/api/assistant/runs", tok, `{"title":"retries"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	id := run["runId"].(string)

	const posts = 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	seqs := map[float64]int{}
	for i := range posts {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+id+"/messages?wait=30s", tok,
				`{"content":"only once"}`, "Idempotency-Key", "retry-7")
			if code != 200 || body["status"] != "completed" || body["reply"] != "ok" {
				t.Errorf("post = %d %v, want 200 with the turn's reply", code, body)
			}
			mu.Lock()
			defer mu.Unlock()
			seqs[body["seq"].(float64)]++
		})
	}
	wg.Wait()
	if len(seqs) != 1 {
		t.Fatalf("posts answered with the messages %v, want one", seqs)
	}
	events := apitest.Events(t, a.url, tok, id)
	if n, m, u := countType(events, "agent.turn.start"), countType(events, "agent.turn.end"), countType(events, "message.user"); n != 1 || m != 1 || u != 1 {
		t.Fatalf("%d posts with one key: %d user messages, %d turn starts, %d ends; want 1, 1, 1", posts, u, n, m)
	}
	if code, body := apitest.Call(t, "POST", b.url+"/api/assistant/runs/"+id+"/messages", tok,
		`{"content":"another"}`, "Idempotency-Key", "retry-7"); code != 409 || apitest.ErrorCode(body) != "idempotency_key_reused" {
		t.Errorf("another message with the key = %d %v, want 409 idempotency_key_reused", code, body)
	}
}
