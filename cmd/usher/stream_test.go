package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store/storetest"
)

// sseMessage is one Server-Sent Event.
type sseMessage struct {
	ID    int64
	Event string
	Data  map[string]any
}

// sseStream is an open event stream.
type sseStream struct {
	resp   *http.Response
	events chan sseMessage
	cancel context.CancelFunc
}

// openSSE opens an event stream; lastID, when positive, is sent as
// Last-Event-ID.
func openSSE(t *testing.T, url, token string, lastID int64) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		cancel()
		t.Fatalf("stream = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sseStream{resp: resp, events: make(chan sseMessage, 4096), cancel: cancel}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var m sseMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.Event != "" {
					s.events <- m
				}
				m = sseMessage{}
			case strings.HasPrefix(line, "id: "):
				m.ID, _ = strconv.ParseInt(line[4:], 10, 64)
			case strings.HasPrefix(line, "event: "):
				m.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				json.Unmarshal([]byte(line[6:]), &m.Data)
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// until reads events until one satisfies stop, and returns them all.
func (s *sseStream) until(t *testing.T, stop func(sseMessage) bool) []sseMessage {
	t.Helper()
	var got []sseMessage
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended after %d events", len(got))
			}
			got = append(got, m)
			if stop(m) {
				return got
			}
		case <-timeout:
			t.Fatalf("no matching event within 30s; got %v", got)
		}
	}
}

func isType(typ string) func(sseMessage) bool {
	return func(m sseMessage) bool { return m.Event == typ }
}

// turnOver stops at the end of the step that follows the turn's end in
// the same write: the last event a one-slice turn logs.
func turnOver() func(sseMessage) bool {
	ended := false
	return func(m sseMessage) bool {
		ended = ended || m.Event == "agent.turn.end"
		return ended && m.Event == "agent.step.end"
	}
}

// logSeqs returns the run's event sequences from the API.
func logSeqs(t *testing.T, s *server, token, id string) []int64 {
	var seqs []int64
	for _, e := range apitest.Events(t, s.url, token, id) {
		seqs = append(seqs, int64(e["seq"].(float64)))
	}
	return seqs
}

func ids(ms []sseMessage) []int64 {
	var out []int64
	for _, m := range ms {
		if m.ID > 0 {
			out = append(out, m.ID)
		}
	}
	return out
}

// TestSSEResumesAfterADisconnect drops the stream mid-turn and resumes it
// with Last-Event-ID: every event of the log arrives once, in order.
func TestSSEResumesAfterADisconnect(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	alice := userToken(t, s, "alice")
	release := ms.Hold()
	defer release()
	ms.Reply("the answer, streamed")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"message":"hello"}`)
	id := run["runId"].(string)
	url := s.url + "/api/assistant/runs/" + id + "/events/stream"

	first := openSSE(t, url, alice, 0)
	got := first.until(t, isType("agent.runtime_context"))
	if got[0].Event != "connected" {
		t.Fatalf("first event = %v, want connected", got[0])
	}
	first.close() // mid-turn: the model still holds its reply
	release()

	last := ids(got)[len(ids(got))-1]
	second := openSSE(t, url, alice, last)
	more := second.until(t, turnOver())
	all := append(ids(got), ids(more)...)
	if want := logSeqs(t, s, alice, id); fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("events over two connections = %v, want the log %v", all, want)
	}
	// ?after= resumes the same way.
	third := openSSE(t, url+"?after="+strconv.FormatInt(last, 10), alice, 0)
	if again := third.until(t, turnOver()); fmt.Sprint(ids(again)) != fmt.Sprint(ids(more)) {
		t.Errorf("?after resume = %v, want %v", ids(again), ids(more))
	}
}

// TestSSEDeltasThenCommittedMessage checks that streamed text arrives as
// deltas while the turn runs, followed by the committed message.
func TestSSEDeltasThenCommittedMessage(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil) // the demo model streams word by word
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	stream := openSSE(t, s.url+"/api/assistant/runs/"+id+"/events/stream", alice, 0)
	stream.until(t, isType("connected"))
	if code, _ := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+id+"/messages", alice, `{"content":"what can you do for me today?"}`); code != 202 {
		t.Fatal("post failed")
	}
	got := stream.until(t, isType("message.assistant"))
	var streamed strings.Builder
	for _, m := range got {
		if m.Event == "delta" {
			streamed.WriteString(m.Data["text"].(string))
		}
	}
	committed := got[len(got)-1].Data["data"].(map[string]any)["content"].(string)
	if streamed.Len() == 0 || streamed.String() != committed {
		t.Errorf("deltas %q, committed %q", streamed.String(), committed)
	}
}

// TestLongPollAndWebSocketResume reads the same log through the long-poll
// and the WebSocket, resuming from a sequence.
func TestLongPollAndWebSocketResume(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	base := s.url + "/api/assistant/runs/" + id

	// A long-poll with nothing to read waits, then answers the first
	// events appended: the message is posted once the poll is waiting in
	// the server (a live-update subscriber there) and has not answered.
	type result struct {
		code int
		body map[string]any
	}
	polled := make(chan result, 1)
	go func() {
		code, body := apitest.Call(t, "GET", base+"/events?after=0&wait=30s", alice, "")
		polled <- result{code, body}
	}()
	testenv.WaitFor(t, 10*time.Second, func() bool {
		select {
		case r := <-polled:
			t.Fatalf("the long-poll answered before anything was appended: %d %v", r.code, r.body)
		default:
		}
		return metric(t, s, "usher_live_subscribers") == 1
	})
	if code, _ := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, `{"content":"call notes_list"}`); code != 200 {
		t.Fatal("turn failed")
	}
	r := <-polled
	if r.code != 200 || len(r.body["events"].([]any)) == 0 || r.body["events"].([]any)[0].(map[string]any)["seq"].(float64) != 1 {
		t.Fatalf("long-poll = %d %v", r.code, r.body)
	}
	// Nothing new: the long-poll times out empty.
	want := logSeqs(t, s, alice, id)
	last := want[len(want)-1]
	code, body := apitest.Call(t, "GET", fmt.Sprintf("%s/events?after=%d&wait=300ms", base, last), alice, "")
	if code != 200 || len(body["events"].([]any)) != 0 {
		t.Errorf("idle long-poll = %d %v", code, body)
	}

	// The WebSocket from the middle of the log.
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/events/ws?after=3"
	h := http.Header{"Authorization": {"Bearer " + alice}}
	conn, resp, err := websocket.DefaultDialer.Dial(wsURL, h)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer conn.Close()
	var got []int64
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(got) < len(want)-3 {
		var m struct {
			Event string
			ID    int64
		}
		if err := conn.ReadJSON(&m); err != nil {
			t.Fatalf("read: %v after %v", err, got)
		}
		if m.ID > 0 {
			got = append(got, m.ID)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want[3:]) {
		t.Errorf("websocket from 3 = %v, want %v", got, want[3:])
	}
	// Another origin's page may not open it.
	h.Set("Origin", "http://evil.example.com")
	if _, resp, err := websocket.DefaultDialer.Dial(wsURL, h); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Errorf("cross-origin websocket = %v, %v; want 403", resp, err)
	}
	// Another user sees nothing.
	bob := userToken(t, s, "bob")
	if _, resp, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Authorization": {"Bearer " + bob}}); err == nil || resp.StatusCode != 404 {
		t.Errorf("another user's websocket = %v, %v; want 404", resp, err)
	}
	if code, _ := apitest.Call(t, "GET", base+"/events/stream", bob, ""); code != 404 {
		t.Errorf("another user's stream = %d, want 404", code)
	}
	if code, body := apitest.Call(t, "GET", base+"/events?wait=forever", alice, ""); code != 400 || apitest.ErrorCode(body) != "invalid_wait" {
		t.Errorf("bad wait = %d %v", code, body)
	}
}

// TestLongPollOnlyTransport turns the streams off: their URLs answer 503.
func TestLongPollOnlyTransport(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_EVENTS_TRANSPORT": "long-poll"})
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	base := s.url + "/api/assistant/runs/" + run["runId"].(string)
	for _, u := range []string{base + "/events/stream", base + "/events/ws", s.url + "/api/assistant/updates/stream"} {
		if code, body := apitest.Call(t, "GET", u, alice, ""); code != 503 || apitest.ErrorCode(body) != "streaming_disabled" {
			t.Errorf("%s = %d %v, want 503", u, code, body)
		}
	}
	if code, _ := apitest.Call(t, "GET", base+"/events?after=0&wait=100ms", alice, ""); code != 200 {
		t.Errorf("long-poll = %d", code)
	}
}

// TestFeedAnnouncesRunsAndApprovals follows the sidebar feed through a
// run's creation, an approval and its decision.
func TestFeedAnnouncesRunsAndApprovals(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	alice, bob := userToken(t, s, "alice"), userToken(t, s, "bob")
	feed := openSSE(t, s.url+"/api/assistant/updates/stream", alice, 0)
	bobFeed := openSSE(t, s.url+"/api/assistant/updates/stream", bob, 0)
	feed.until(t, isType("connected"))
	bobFeed.until(t, isType("connected"))
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"feed"}`)
	id := run["runId"].(string)
	feed.until(t, func(m sseMessage) bool { return m.Event == "run" && m.Data["runId"] == id })
	apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+id+"/messages", alice, `{"content":"call notes_write {\"name\":\"f\",\"body\":\"b\"}"}`)
	// Within a moment's changes, runs come before approvals: wait for both.
	var approvalID string
	sawPaused := false
	feed.until(t, func(m sseMessage) bool {
		if m.Event == "approval" && m.Data["status"] == "pending" {
			approvalID = m.Data["id"].(string)
		}
		if m.Event == "run" && m.Data["status"] == "AwaitingApproval" {
			sawPaused = true
		}
		return approvalID != "" && sawPaused
	})
	apitest.Call(t, "POST", s.url+"/api/approvals/"+approvalID+"/decision", alice, `{"decision":"deny","reason":"not now"}`)
	sawDenied, sawResumed := false, false
	feed.until(t, func(m sseMessage) bool {
		sawDenied = sawDenied || (m.Event == "approval" && m.Data["status"] == "denied")
		sawResumed = sawResumed || (m.Event == "run" && m.Data["status"] == "InProgress")
		return sawDenied && sawResumed
	})
	// Bob heard nothing of it.
	select {
	case m := <-bobFeed.events:
		if m.Event != "heartbeat" {
			t.Errorf("bob's feed got %v", m)
		}
	case <-time.After(300 * time.Millisecond):
	}
}

// TestThousandSubscribers streams one run to 1,000 subscribers at once:
// every one receives every event, in order.
func TestThousandSubscribers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("1,000 streams")
	}
	// One user holds them all: far beyond the per-user bound's default.
	s := startServer(t, map[string]string{"USHER_EVENTS_MAX_STREAMS_PER_USER": "1000"})
	alice := userToken(t, s, "alice")
	_, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, "")
	id := run["runId"].(string)
	url := s.url + "/api/assistant/runs/" + id + "/events/stream"
	const n = 1000
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}}
	var wg sync.WaitGroup
	results := make([][]int64, n)
	ready := make(chan struct{}, n)
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Authorization", "Bearer "+alice)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				ready <- struct{}{}
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			signalled, ended := false, false
			for sc.Scan() {
				line := sc.Text()
				if !signalled && line == "event: connected" {
					ready <- struct{}{}
					signalled = true
				}
				if v, ok := strings.CutPrefix(line, "id: "); ok {
					seq, _ := strconv.ParseInt(v, 10, 64)
					results[i] = append(results[i], seq)
				}
				// The turn's last event: the end of its step, after its end.
				ended = ended || line == "event: agent.turn.end"
				if ended && line == "event: agent.step.end" {
					return
				}
			}
		})
	}
	for range n {
		<-ready
	}
	if code, _ := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+id+"/messages", alice, `{"content":"call notes_list"}`); code != 202 {
		t.Fatal("post failed")
	}
	wg.Wait()
	want := fmt.Sprint(logSeqs(t, s, alice, id))
	for i, got := range results {
		if fmt.Sprint(got) != want {
			t.Fatalf("subscriber %d got %v, want %v", i, got, want)
		}
	}
}

// TestEventsCrossProcesses appends events through one process and streams
// them from another on the same PostgreSQL database.
func TestEventsCrossProcesses(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	lb := newBalancer(t)
	env := map[string]string{
		"USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=",
		"USHER_SERVER_PUBLIC_URL":         lb.url,
	}
	addrA, addrB := testenv.FreeAddr(t), testenv.FreeAddr(t)
	a := startServer(t, env, "--database-url", dbURL, "--addr", addrA)
	b := startServer(t, env, "--database-url", dbURL, "--addr", addrB)
	a.url, b.url = "http://"+addrA, "http://"+addrB
	lb.set(a.url)
	tok, err := a.cli(t, "token", "user", "--sub", "dana", "--database-url", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	_, run := apitest.Call(t, "POST", a.url+"/api/assistant/runs", tok, "")
	id := run["runId"].(string)
	stream := openSSE(t, b.url+"/api/assistant/runs/"+id+"/events/stream", tok, 0)
	stream.until(t, isType("connected"))
	feed := openSSE(t, b.url+"/api/assistant/updates/stream", tok, 0)
	feed.until(t, isType("connected"))
	// The message is appended by A, so its event can reach B's stream only
	// through PostgreSQL; the turn runs on either replica.
	if code, _ := apitest.Call(t, "POST", a.url+"/api/assistant/runs/"+id+"/messages", tok, `{"content":"call notes_list"}`); code != 202 {
		t.Fatal("post failed")
	}
	got := stream.until(t, turnOver())
	if want := logSeqs(t, a, tok, id); fmt.Sprint(ids(got)) != fmt.Sprint(want) {
		t.Errorf("events on the other process = %v, want %v", ids(got), want)
	}
	feed.until(t, func(m sseMessage) bool { return m.Event == "run" && m.Data["runId"] == id })
}
