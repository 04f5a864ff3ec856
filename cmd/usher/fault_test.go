package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
)

// The fault-injection suite's schedule and bounds. Every loop and wait is
// bounded by them, so the suite ends by itself in about a minute.
const (
	faultConversations = 20
	faultFlaps         = 10
	faultFlapFor       = 2 * time.Second        // one flap of the database
	faultKillEvery     = 100 * time.Millisecond // backends terminated this often during a flap
	faultStep          = 300 * time.Millisecond // the scripted model's time per step
	faultLease         = 5 * time.Second
	// faultPostFor is how long after the last flap a client still retries
	// a message. While the database flaps (some 87 % of the time from the
	// first flap to the last) a post can fail attempt after attempt, each
	// tried three times by the server, for more than ten seconds on a busy
	// machine; once the database is back, every message a client retried
	// must be stored, once.
	faultPostFor = 10 * time.Second
	// faultRecovery bounds the wait, after the flaps, until every message
	// is answered: the lease, the longest retry backoff a run whose slices
	// failed flap after flap may be in (it doubles from a second with each
	// failure in a row, to the runtime's cap of a minute), and the work
	// left.
	faultRecovery     = faultLease + time.Minute + 10*time.Second
	faultModelTimeout = 8 * time.Second // one model step, in the flaps
	// faultTakeoverBound is the loose bound of a takeover: on a quiet
	// machine the survivor's model request comes 5.0 s after the kill (the
	// victim renewed its lease moments before), and under a full test
	// suite on two cores it has come later than lease + 5 s; a takeover
	// that waits for the sweep (faultTakeoverSweep) is still far beyond it.
	faultTakeoverBound = faultLease + 15*time.Second
	faultTakeoverSweep = 60 * time.Second
)

// TestFault runs real `usher serve` processes on a PostgreSQL database of
// its own and injects faults: database flaps (every backend of that
// database terminated again and again), kill -9 of the replica running a
// turn, and a message arriving during a slow turn. It checks the central
// promise: every stored user message gets exactly one answer, in order,
// and every tool outcome is recorded.
func TestFault(t *testing.T) {
	t.Parallel()
	faultServerURL(t)
	bin := testenv.Usher(t)
	t.Run("Flaps", func(t *testing.T) { testFaultFlaps(t, bin) })
	t.Run("TurnOrder", func(t *testing.T) { testFaultTurnOrder(t, bin) })
	t.Run("Takeover", func(t *testing.T) { testFaultTakeover(t, bin) })
}

// testFaultFlaps posts messages to 20 conversations on two replicas while
// the database flaps, ten times; once it is back, every stored user
// message has exactly one answering turn, every posted message is stored
// once (clients retry with an Idempotency-Key), no event log has a gap or a
// repeat, no tool execution is left started, and the audit log verifies.
func testFaultFlaps(t *testing.T, bin string) {
	c := newFaultCluster(t, bin, faultStep,
		"USHER_ASSISTANT_LEASE="+faultLease.String(), "USHER_ASSISTANT_SWEEP_INTERVAL=5s",
		"USHER_ASSISTANT_MAX_ACTIVE_RUNS=50", "USHER_ASSISTANT_MAX_CONCURRENCY=10",
		// A model answer that stalls (it happened in the test's model
		// proxy: a replica waited for its response headers past the
		// recovery bound) ends its turn visibly within this, as
		// model.timeout bounds a real model's; the proxy's goroutines are
		// printed when the test fails (faultProxyStacks).
		"USHER_MODEL_TIMEOUT="+faultModelTimeout.String())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the test's model proxy and balancer at the end:\n%s", faultProxyStacks())
		}
	})
	a, b := c.start("a"), c.start("b")
	c.lb.set(a.url, b.url)
	c.signIn()
	runs := make([]string, faultConversations)
	for i := range runs {
		runs[i] = c.newRun(fmt.Sprintf("conversation %d", i))
	}

	var clients sync.WaitGroup
	defer clients.Wait()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// The clients retry until faultPostFor after the last flap.
	retries, stopRetries := context.WithCancel(ctx)
	defer stopRetries()
	var mu sync.Mutex
	outcomes := map[int][]faultPost{} // by flap
	terminated := 0
	began := time.Now()
	for f := range faultFlaps {
		flapCtx, stopFlap := context.WithTimeout(ctx, faultFlapFor)
		flapped := make(chan error, 1)
		go func() {
			n, err := c.db.flap(flapCtx, faultKillEvery)
			mu.Lock()
			terminated += n
			mu.Unlock()
			flapped <- err
		}()
		// The conversations post one after the other across the flap;
		// half of them wait for the turn, as ?wait=... clients do.
		for i, run := range runs {
			content := fmt.Sprintf("flap %d conversation %d", f, i)
			if (f+i)%3 == 0 {
				content += " with a tool"
			}
			wait := ""
			if i%2 == 1 {
				wait = "5s"
			}
			key := fmt.Sprintf("fault-%d-%d", f, i)
			offset := time.Duration(i) * faultFlapFor / faultConversations
			clients.Go(func() {
				select {
				case <-time.After(offset):
				case <-ctx.Done():
					return
				}
				o := c.post(ctx, retries, run, key, content, wait)
				mu.Lock()
				outcomes[f] = append(outcomes[f], o)
				mu.Unlock()
			})
		}
		err := <-flapped
		stopFlap()
		if err != nil {
			t.Fatalf("flap %d: terminating the backends failed: %v", f, err)
		}
		// A breath between flaps, as between outages.
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	flapped := time.Since(began)
	stopAfter := time.AfterFunc(faultPostFor, stopRetries)
	defer stopAfter.Stop()
	clients.Wait()
	for name, p := range map[string]*process{"a": a, "b": b} {
		select {
		case <-p.done:
			t.Errorf("replica %s exited during the flaps", name)
		default:
		}
	}

	// Recovery: wait, bounded, until every stored message is answered
	// and every tool execution has an outcome.
	l, recovered, _ := waitFaultLedger(t, c.db.url, faultRecovery, faultSettled)

	// What the clients were told, against what was stored.
	posted, accepted, attempts, serverErrs, retryLater, netErrs, survived := 0, 0, 0, 0, 0, 0, 0
	var lost []string
	for f := range faultFlaps {
		ok := true
		for _, o := range outcomes[f] {
			posted++
			attempts += len(o.tries)
			serverErrs += o.serverErrs
			retryLater += o.retryLater
			netErrs += o.netErrs
			stored := l.stored[o.content]
			switch {
			case o.acked && stored == 1:
				accepted++
			case o.acked:
				accepted++
				ok = false
				lost = append(lost, fmt.Sprintf("%q: accepted after %d attempt(s) with one Idempotency-Key, stored %d times, want once", o.content, len(o.tries), stored))
			default:
				ok = false
				lost = append(lost, fmt.Sprintf("%q: not accepted in %d attempt(s) started until %s after the flaps (%s; last answer: %s); stored %d times", o.content, len(o.tries), faultPostFor, strings.Join(o.tries, ", "), o.last, stored))
			}
			if l.unanswered[o.content] {
				ok = false
			}
		}
		if ok && len(outcomes[f]) == faultConversations {
			survived++
		}
	}
	t.Logf("fault figures (flaps): %d flaps of %s, backends terminated every %s (%d terminations), over %s; "+
		"%d of %d flaps survived (every message stored once and answered once); "+
		"messages posted %d, accepted %d (%d attempts, %d answers 5xx of which %d 503 unavailable, %d connection failures), stored %d, answered %d; "+
		"turns ended failed (visibly) %d; %d runs, %d events; tool executions %v; recovery %s (bound %s)",
		faultFlaps, faultFlapFor, faultKillEvery, terminated, flapped.Round(time.Millisecond),
		survived, faultFlaps,
		posted, accepted, attempts, serverErrs, retryLater, netErrs, l.userMessages, l.answered,
		l.failedTurns, l.runs, l.events, l.executions, recovered.Round(time.Millisecond), faultRecovery)

	if len(l.problems) > 0 {
		t.Errorf("%d broken promise(s) in the event logs %s after the flaps (every user message answered by exactly one turn; no gap or repeat):\n%s",
			len(l.problems), faultRecovery, faultLines(l.problems, 12))
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d posted messages were not stored exactly once:\n%s", len(lost), posted, faultLines(lost, 12))
	}
	// A post the flaps failed is answered as the database being out of
	// reach (503 unavailable, Retry-After), not as a bug of the server's.
	if serverErrs > 0 && retryLater == 0 {
		t.Errorf("none of the %d answers 5xx during the flaps was 503 unavailable with a Retry-After", serverErrs)
	}
	if n := l.executions["started"]; n > 0 {
		t.Errorf("%d tool execution(s) left started after the flaps (%v): their outcome was neither recorded nor declared unknown:\n%s", n, l.executions, faultLines(l.started, 12))
	}
	if l.executions["succeeded"]+l.executions["failed"]+l.executions["outcome_unknown"] == 0 {
		t.Errorf("no tool execution was recorded (%v): the suite's tool calls did not run", l.executions)
	}
	if refused := c.model.refusals(); len(refused) > 0 {
		t.Errorf("the model server refused %d request(s), the first: %s", len(refused), refused[0])
	}
	if out, err := c.cli("audit", "verify"); err != nil || !strings.Contains(out, "audit log intact") {
		t.Errorf("usher audit verify after the flaps: %v\n%s", err, out)
	}
}

// testFaultTurnOrder posts a message while a slow turn works: the next
// turn's model request has the history in turn order and ends with that
// message.
func testFaultTurnOrder(t *testing.T, bin string) {
	c := newFaultCluster(t, bin, faultStep, "USHER_ASSISTANT_LEASE="+faultLease.String())
	a, b := c.start("a"), c.start("b")
	c.lb.set(a.url, b.url)
	c.signIn()
	run := c.newRun("order")
	base := c.lb.url + "/api/assistant/runs/" + run

	release := c.model.hold()
	defer release()
	n := c.model.arrived()
	if code, body := apitest.Call(t, "POST", base+"/messages", c.token, `{"content":"first question"}`); code != 202 {
		t.Fatalf("post the first question = %d %v", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := c.model.waitArrival(ctx, n, func(modelArrival) bool { return true }); err != nil {
		t.Fatalf("the first turn made no model request: %v", err)
	}
	// The first turn's model step is in flight: the second question
	// arrives during the turn.
	if code, body := apitest.Call(t, "POST", base+"/messages", c.token, `{"content":"second question"}`); code != 202 {
		t.Fatalf("post the second question = %d %v", code, body)
	}
	release()

	l, _, ok := waitFaultLedger(t, c.db.url, 20*time.Second, func(l *faultLedger) bool { return l.userMessages == 2 && faultSettled(l) })
	if !ok {
		t.Errorf("the two questions were not answered once each within 20s (%d stored):\n%s", l.userMessages, faultLines(l.problems, 5))
	}
	var second []string
	for _, req := range c.model.ms.Requests() {
		if slices.ContainsFunc(req.Messages, func(m modeltest.RecordedMessage) bool { return m.Content == "second question" }) {
			for _, m := range req.Messages[1:] { // after the system prompt
				second = append(second, m.Role+": "+m.Content)
			}
			break
		}
	}
	want := []string{"user: first question", "assistant: re: first question", "user: second question"}
	t.Logf("fault figures (turn order): the second turn's model request: %q", second)
	if !slices.Equal(second, want) {
		t.Errorf("the model request of the turn that answers the second question = %q,\nwant %q: in turn order, ending with the message that started the turn", second, want)
	}
}

// testFaultTakeover kills (SIGKILL) the replica whose turn is waiting for
// the model: the other takes the run over within faultTakeoverBound, although its
// sweep runs only every faultTakeoverSweep, and the turn ends once.
func testFaultTakeover(t *testing.T, bin string) {
	c := newFaultCluster(t, bin, faultStep, "USHER_ASSISTANT_LEASE="+faultLease.String(), "USHER_ASSISTANT_SWEEP_INTERVAL="+faultTakeoverSweep.String())
	replicas := map[string]*process{"a": c.start("a"), "b": c.start("b")}
	c.lb.set(replicas["a"].url, replicas["b"].url)
	c.signIn()
	run := c.newRun("takeover")

	release := c.model.hold()
	defer release()
	n := c.model.arrived()
	if code, body := apitest.Call(t, "POST", c.lb.url+"/api/assistant/runs/"+run+"/messages", c.token, `{"content":"survive a kill"}`); code != 202 {
		t.Fatalf("post = %d %v", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first, err := c.model.waitArrival(ctx, n, func(modelArrival) bool { return true })
	if err != nil {
		t.Fatalf("the turn made no model request: %v", err)
	}
	victim := first.replica
	survivor := "a"
	if victim == "a" {
		survivor = "b"
	}
	c.lb.set(replicas[survivor].url)
	killed := time.Now()
	if err := replicas[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-replicas[victim].done
	release()

	wctx, wcancel := context.WithTimeout(t.Context(), faultTakeoverBound)
	defer wcancel()
	tookOver := func(a modelArrival) bool { return a.replica == survivor && a.at.After(killed) }
	next, err := c.model.waitArrival(wctx, n, tookOver)
	if err != nil {
		// Say when it did come, if it did: at the sweep, the lease's
		// expiry did not wake the survivor; sooner, the machine was slow.
		late := "not even by the sweep"
		lctx, lcancel := context.WithTimeout(t.Context(), faultTakeoverSweep+5*time.Second-time.Since(killed))
		defer lcancel()
		if a, err := c.model.waitArrival(lctx, n, tookOver); err == nil {
			late = "after " + a.at.Sub(killed).Round(time.Millisecond).String()
		}
		t.Fatalf("replica %s did not take the run over within %s of kill -9 of replica %s (lease %s), but %s: a takeover must come at lease expiry, not at the sweep (every %s here)",
			survivor, faultTakeoverBound, victim, faultLease, late, faultTakeoverSweep)
	}
	took := next.at.Sub(killed)
	t.Logf("fault figures (takeover): %s from kill -9 of replica %s to replica %s's model request (lease %s, sweep interval %s)",
		took.Round(time.Millisecond), victim, survivor, faultLease, faultTakeoverSweep)
	if took >= faultTakeoverBound {
		t.Errorf("takeover took %s, want less than %s", took, faultTakeoverBound)
	}

	// The taken-over turn ends once, answering the message.
	l, _, ok := waitFaultLedger(t, c.db.url, 20*time.Second, func(l *faultLedger) bool { return l.userMessages == 1 && faultSettled(l) })
	if !ok {
		t.Errorf("the message was not answered once within 20s of the takeover (%d stored):\n%s", l.userMessages, faultLines(l.problems, 5))
	}
}
