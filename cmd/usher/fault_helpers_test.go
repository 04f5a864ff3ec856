package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store/storetest"
)

// faultDB is a PostgreSQL database of a fault test's own, on the server
// named by TEST_DATABASE_URL: the test may terminate its backends, which
// touches no other test (they share the server's test database, each in a
// schema of its own).
type faultDB struct {
	name  string
	url   string // the database's own URL
	admin string // TEST_DATABASE_URL: where the terminations are sent from
}

// newFaultDB creates the database and drops it when the test ends (after
// the replicas started later are gone: cleanups run last-in first-out).
func newFaultDB(t *testing.T) *faultDB {
	t.Helper()
	base := faultServerURL(t)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL", storetest.DatabaseURLEnv)
	}
	var b [6]byte
	rand.Read(b[:])
	d := &faultDB{name: "usher_fault_" + hex.EncodeToString(b[:]), admin: base}
	d.exec(t, "CREATE DATABASE "+pgx.Identifier{d.name}.Sanitize())
	t.Cleanup(func() { d.exec(t, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)") })
	u.Path = "/" + d.name
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	d.url = u.String()
	return d
}

// faultServerURL returns TEST_DATABASE_URL: the fault-injection suite
// runs on PostgreSQL (testenv.DatabaseURL).
func faultServerURL(t *testing.T) string {
	t.Helper()
	return testenv.DatabaseURL(t)
}

// faultAdminTimeout bounds a statement on the admin connection. DROP
// DATABASE waits for a checkpoint (PostgreSQL requests one, immediate, and
// waits for it), which on a server busy with a whole test suite's writes
// has taken more than 30 seconds.
const faultAdminTimeout = 2 * time.Minute

// exec runs one statement on the admin connection.
func (d *faultDB) exec(t *testing.T, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultAdminTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		t.Fatalf("connect to %s: %v", storetest.DatabaseURLEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Errorf("%s: %v", sql, err)
	}
}

// flap terminates every backend of the database every interval until ctx
// ends, as a failing database or a proxy in front of it would, and returns
// how many it terminated. Its own connection is to the admin database, so
// it survives.
func (d *faultDB) flap(ctx context.Context, interval time.Duration) (int, error) {
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	total := 0
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid()`, d.name).Scan(&n)
		if ctx.Err() != nil {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		total += n
		select {
		case <-ctx.Done():
			return total, nil
		case <-tick.C:
		}
	}
}

// replicaHeader names, in the requests the model server records, the
// replica a request came from.
const replicaHeader = "X-Fault-Replica"

// modelProxy stands in front of the scripted model server: each replica is
// configured with a base URL of its own (/<replica>/v1), so every request
// says which process made it; the proxy takes delay per step (a slow
// model), can hold requests, and scripts each answer from the request it
// answers: a user message that asks for a "tool" gets a call of
// notes_list, anything else the text "re: " and the last user message.
// The answers themselves, and the record of every request, are the
// scripted model server's.
type modelProxy struct {
	ms    *modeltest.Server
	srv   *httptest.Server
	delay time.Duration

	// forward serialises scripting an answer and having the model server
	// use it, so that concurrent requests get their own answers.
	forward sync.Mutex

	mu       sync.Mutex
	arrivals []modelArrival
	changed  chan struct{} // closed and replaced when arrivals change
	gate     chan struct{} // while not nil, requests wait for it to close
	refused  []string      // answers other than 200, as "status body"
	calls    int
}

// modelArrival is one request as it reached the proxy.
type modelArrival struct {
	replica string
	at      time.Time
}

func newModelProxy(t *testing.T, delay time.Duration) *modelProxy {
	t.Helper()
	p := &modelProxy{ms: modeltest.NewServer(t), delay: delay, changed: make(chan struct{})}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// baseURL is the model base URL replica is configured with.
func (p *modelProxy) baseURL(replica string) string { return p.srv.URL + "/" + replica + "/v1" }

// hold makes requests wait (after they are counted as arrived) until
// release is called. release is idempotent.
func (p *modelProxy) hold() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gate := make(chan struct{})
	p.gate = gate
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			close(gate)
			if p.gate == gate {
				p.gate = nil
			}
		})
	}
}

// waitArrival waits until a request after the first n arrivals satisfies
// ok, and returns it.
func (p *modelProxy) waitArrival(ctx context.Context, n int, ok func(modelArrival) bool) (modelArrival, error) {
	for {
		p.mu.Lock()
		for _, a := range p.arrivals[min(n, len(p.arrivals)):] {
			if ok(a) {
				p.mu.Unlock()
				return a, nil
			}
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return modelArrival{}, ctx.Err()
		}
	}
}

// arrived returns how many requests have arrived.
func (p *modelProxy) arrived() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.arrivals)
}

// refusals returns the model server's answers other than 200.
func (p *modelProxy) refusals() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

// proxyRequest is the part of a Chat Completions request the proxy reads.
type proxyRequest struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

func (p *modelProxy) serve(w http.ResponseWriter, r *http.Request) {
	replica, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.arrivals = append(p.arrivals, modelArrival{replica: replica, at: time.Now()})
	close(p.changed)
	p.changed = make(chan struct{})
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	select {
	case <-time.After(p.delay):
	case <-r.Context().Done():
		return
	}

	var req proxyRequest
	_ = json.Unmarshal(body, &req) // the model server judges a bad body
	lastUser, lastRole := "", ""
	for _, m := range req.Messages {
		lastRole = m.Role
		if m.Role == "user" {
			var s string
			_ = json.Unmarshal(m.Content, &s)
			lastUser = s
		}
	}

	p.forward.Lock()
	defer p.forward.Unlock()
	if lastRole == "user" && strings.Contains(lastUser, "tool") {
		p.mu.Lock()
		p.calls++
		id := fmt.Sprintf("call-%d", p.calls)
		p.mu.Unlock()
		p.ms.ReplyToolCalls(model.ToolCall{ID: id, Name: "notes_list", Arguments: json.RawMessage(`{}`)})
	} else {
		p.ms.Reply("re: " + lastUser)
	}
	// The exchange with the model server is local and quick: it finishes
	// even when the replica went away, so that the answer scripted for
	// this request is used by this request.
	ctx := context.WithoutCancel(r.Context())
	status, header, answer, err := p.exchange(ctx, rest, body, r.Header, replica)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if status != http.StatusOK {
		p.mu.Lock()
		p.refused = append(p.refused, fmt.Sprintf("%d %s for the conversation [%s]", status, bytes.TrimSpace(answer), conversationShape(body)))
		p.mu.Unlock()
		// A refused request left its scripted answer unused: use it up,
		// so that the next request gets its own.
		drain := []byte(`{"model":"scripted","messages":[{"role":"user","content":"drain"}]}`)
		for p.ms.Pending() > 0 {
			if _, _, _, err := p.exchange(ctx, "v1/chat/completions", drain, http.Header{"Content-Type": {"application/json"}}, "drain"); err != nil {
				break
			}
		}
	}
	for k, v := range header {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// conversationShape describes a request's conversation by role, with the ids of tool
// calls and results: "system user assistant(call-1) tool(call-1)".
func conversationShape(body []byte) string {
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	var parts []string
	for _, m := range req.Messages {
		part := m.Role
		var ids []string
		for _, c := range m.ToolCalls {
			ids = append(ids, c.ID)
		}
		if m.ToolCallID != "" {
			ids = append(ids, m.ToolCallID)
		}
		if len(ids) > 0 {
			part += "(" + strings.Join(ids, ",") + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, " ")
}

// exchange sends one request to the model server and reads its answer.
func (p *modelProxy) exchange(ctx context.Context, path string, body []byte, h http.Header, replica string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(p.ms.URL(), "/v1")+"/"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header = h.Clone()
	req.Header.Set(replicaHeader, replica)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, answer, err
}

// faultCluster is two or more `usher serve` processes on one database of
// their own, behind a round-robin balancer, with the slow scripted model.
type faultCluster struct {
	t     *testing.T
	bin   string
	db    *faultDB
	model *modelProxy
	lb    *balancer
	env   []string
	token string // alice's API token
}

func newFaultCluster(t *testing.T, bin string, delay time.Duration, extraEnv ...string) *faultCluster {
	t.Helper()
	c := &faultCluster{t: t, bin: bin, db: newFaultDB(t), model: newModelProxy(t, delay), lb: newBalancer(t)}
	c.env = append([]string{
		"USHER_DATABASE_URL=" + c.db.url,
		"USHER_BROKER_KEY_ENCRYPTION_KEY=q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=",
		"USHER_SERVER_PUBLIC_URL=" + c.lb.url,
		"USHER_MODEL_PROVIDER=openai", "USHER_MODEL_NAME=scripted", "USHER_MODEL_API_KEY=k",
		// The CLI's; each replica has a base URL of its own (the last
		// value of a variable wins).
		"USHER_MODEL_BASE_URL=" + c.model.baseURL("cli"),
		// A failing test prints the replicas' logs: what went wrong.
		"USHER_LOG_LEVEL=warn",
	}, extraEnv...)
	return c
}

// start starts the replica name and waits until it is ready.
func (c *faultCluster) start(name string) *process {
	c.t.Helper()
	return startProcess(c.t, c.bin, append(c.env[:len(c.env):len(c.env)], "USHER_MODEL_BASE_URL="+c.model.baseURL(name)), testenv.FreeAddr(c.t))
}

// cli runs an usher command against the cluster's database.
func (c *faultCluster) cli(args ...string) (string, error) {
	cmd := exec.Command(c.bin, append(args, "--data-dir", c.t.TempDir())...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// signIn gets alice's API token.
func (c *faultCluster) signIn() {
	c.t.Helper()
	tok, err := c.cli("token", "user", "--sub", "alice")
	if err != nil {
		c.t.Fatalf("usher token user: %v\n%s", err, tok)
	}
	c.token = tok
}

// newRun creates an empty run through the balancer.
func (c *faultCluster) newRun(title string) string {
	c.t.Helper()
	body, _ := json.Marshal(map[string]string{"title": title})
	code, run := apitest.Call(c.t, "POST", c.lb.url+"/api/assistant/runs", c.token, string(body))
	if code != 201 {
		c.t.Fatalf("create run = %d %v", code, run)
	}
	return run["runId"].(string)
}

// faultPost is what a client that retries saw of one message.
type faultPost struct {
	content    string
	acked      bool // a 2xx answer came, at last
	serverErrs int  // 5xx answers
	retryLater int  // of them, 503 unavailable with a Retry-After: the database was out of reach
	netErrs    int  // no answer: the connection failed or timed out
	last       string
	tries      []string // each attempt (their number is the attempts): when it started, after the first, and how long its answer took
}

// post sends a message to a run as a careful client does: with an
// Idempotency-Key, again with the same key after a failure, until an
// answer of 2xx or the end of retries, which bounds when an attempt may
// start; each attempt has a timeout of its own (a ?wait answer comes after
// its wait). wait, when set, is the ?wait of the request.
func (c *faultCluster) post(ctx, retries context.Context, runID, key, content, wait string) faultPost {
	out := faultPost{content: content}
	body, _ := json.Marshal(map[string]string{"content": content})
	u := c.lb.url + "/api/assistant/runs/" + runID + "/messages"
	if wait != "" {
		u += "?wait=" + wait
	}
	client := &http.Client{Timeout: 15 * time.Second}
	first := time.Now()
	for retries.Err() == nil {
		began := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		answer := "no answer"
		if err == nil {
			answer = strconv.Itoa(resp.StatusCode)
		}
		out.tries = append(out.tries, fmt.Sprintf("+%.1fs: %s in %.1fs", began.Sub(first).Seconds(), answer, time.Since(began).Seconds()))
		if err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out.last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(raw))
			switch {
			case resp.StatusCode/100 == 2:
				out.acked = true
				return out
			case resp.StatusCode >= 500:
				out.serverErrs++
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" &&
					bytes.Contains(raw, []byte(`"code":"unavailable"`)) {
					out.retryLater++
				}
			default:
				return out // refused: retrying the same request cannot help
			}
		} else if ctx.Err() == nil {
			out.netErrs++
			out.last = err.Error()
		}
		select {
		case <-retries.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return out
}

// faultLedger is what the database holds after the faults: every run's event
// log, checked against the promises.
type faultLedger struct {
	runs, events int
	userMessages int
	answered     int             // user messages with exactly one turn start and one turn end
	failedTurns  int             // turns that ended visibly failed
	stored       map[string]int  // copies stored of each user message's content
	unanswered   map[string]bool // contents of user messages without exactly one turn
	executions   map[string]int  // tool executions by status
	started      []string        // the executions still started, one line each
	problems     []string        // broken promises, one line each
}

// readFaultLedger reads every run's event log from the database and checks:
// the sequence of each log is 1, 2, … last_seq, with no gap nor repeat;
// every user message has exactly one agent.turn.start and one
// agent.turn.end naming it; no turn names anything else.
func readFaultLedger(ctx context.Context, dbURL string) (*faultLedger, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	type runRow struct {
		id, status, leaseOwner string
		lastSeq, turnSeq       int64
		handledSeq             int64
		queued                 bool
	}
	rows, err := conn.Query(ctx, `SELECT id, status, coalesce(lease_owner, ''), last_seq, turn_seq, handled_seq, queued_at IS NOT NULL
		FROM runs WHERE deleted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, err
	}
	var runs []runRow
	for rows.Next() {
		var r runRow
		if err := rows.Scan(&r.id, &r.status, &r.leaseOwner, &r.lastSeq, &r.turnSeq, &r.handledSeq, &r.queued); err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	type event struct {
		seq     int64
		typ     string
		payload []byte
	}
	logs := map[string][]event{}
	rows, err = conn.Query(ctx, `SELECT run_id, seq, type, payload::text FROM run_events ORDER BY run_id, seq`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var e event
		var payload string
		if err := rows.Scan(&id, &e.seq, &e.typ, &payload); err != nil {
			return nil, err
		}
		e.payload = []byte(payload)
		logs[id] = append(logs[id], e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	l := &faultLedger{runs: len(runs), stored: map[string]int{}, unanswered: map[string]bool{}, executions: map[string]int{}}
	for _, r := range runs {
		log := logs[r.id]
		l.events += len(log)
		for i, e := range log {
			if e.seq != int64(i+1) {
				l.problems = append(l.problems, fmt.Sprintf("run %s: event %d of its log has seq %d (a gap or a repeat)", r.id, i+1, e.seq))
				break
			}
		}
		if n := int64(len(log)); n != r.lastSeq {
			l.problems = append(l.problems, fmt.Sprintf("run %s: %d events stored, last_seq %d", r.id, n, r.lastSeq))
		}
		users := map[int64]string{}
		starts, ends := map[int64]int{}, map[int64]int{}
		for _, e := range log {
			var p struct {
				Content    string `json:"content"`
				MessageSeq int64  `json:"messageSeq"`
				Status     string `json:"status"`
			}
			_ = json.Unmarshal(e.payload, &p)
			switch e.typ {
			case "message.user":
				users[e.seq] = p.Content
				l.stored[p.Content]++
			case "agent.turn.start":
				starts[p.MessageSeq]++
			case "agent.turn.end":
				ends[p.MessageSeq]++
				if p.Status == "failed" {
					l.failedTurns++
				}
			}
		}
		l.userMessages += len(users)
		seqs := make([]int64, 0, len(users))
		for s := range users {
			seqs = append(seqs, s)
		}
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		for _, s := range seqs {
			if starts[s] == 1 && ends[s] == 1 {
				l.answered++
				continue
			}
			l.unanswered[users[s]] = true
			l.problems = append(l.problems, fmt.Sprintf("run %s: user message %d %q has %d turn start(s) and %d turn end(s), want 1 and 1 (run %s, queued %v, lease owner %q, turn_seq %d, handled_seq %d)",
				r.id, s, users[s], starts[s], ends[s], r.status, r.queued, r.leaseOwner, r.turnSeq, r.handledSeq))
		}
		for s, n := range starts {
			if _, ok := users[s]; !ok {
				l.problems = append(l.problems, fmt.Sprintf("run %s: %d turn start(s) name seq %d, which is no user message", r.id, n, s))
			}
		}
		for s, n := range ends {
			if _, ok := users[s]; !ok {
				l.problems = append(l.problems, fmt.Sprintf("run %s: %d turn end(s) name seq %d, which is no user message", r.id, n, s))
			}
		}
	}
	rows, err = conn.Query(ctx, `SELECT status, count(*) FROM tool_executions GROUP BY status`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			return nil, err
		}
		l.executions[status] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, `SELECT e.idempotency_key, e.tool, e.started_at, coalesce(r.turn_seq, 0)
		FROM tool_executions e LEFT JOIN runs r ON r.id = e.run_id WHERE e.status = 'started' ORDER BY e.started_at`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var key, tool string
		var at time.Time
		var turnSeq int64
		if err := rows.Scan(&key, &tool, &at, &turnSeq); err != nil {
			return nil, err
		}
		open := "no turn open in its run"
		if turnSeq != 0 {
			open = fmt.Sprintf("the turn of message %d open in its run", turnSeq)
		}
		l.started = append(l.started, fmt.Sprintf("%s %s, started %s ago, %s", tool, key, time.Since(at).Round(time.Second), open))
	}
	return l, rows.Err()
}

// waitFaultLedger reads the ledger until done holds of it or bound passes, and
// returns the last one read and how long that took. A database error is
// fatal only if it lasts until the end.
func waitFaultLedger(t *testing.T, dbURL string, bound time.Duration, done func(*faultLedger) bool) (*faultLedger, time.Duration, bool) {
	t.Helper()
	began := time.Now()
	for {
		l, err := readFaultLedger(t.Context(), dbURL)
		if err == nil && done(l) {
			return l, time.Since(began), true
		}
		if time.Since(began) > bound {
			if err != nil {
				t.Fatalf("reading the event logs: %v", err)
			}
			return l, time.Since(began), false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// faultSettled reports that every stored message is answered and every tool
// execution has an outcome.
func faultSettled(l *faultLedger) bool { return len(l.problems) == 0 && l.executions["started"] == 0 }

// faultLines joins the first n of lines, and says how many more there are.
func faultLines(lines []string, n int) string {
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n… and %d more", len(lines)-n)
}

// faultProxyStacks returns the stacks of this process's goroutines that
// run the fault tests' model proxy or balancer: where a request they hold
// waits.
func faultProxyStacks() string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var kept []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "modelProxy") || strings.Contains(g, "balancer") {
			kept = append(kept, g)
		}
	}
	if len(kept) == 0 {
		return "(none running)"
	}
	return strings.Join(kept, "\n\n")
}
