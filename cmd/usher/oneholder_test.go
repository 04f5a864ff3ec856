package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
)

// holdWatch samples the durable hold table (held_sessions) until it is
// stopped, and keeps what it saw of each hold, by run and hold: "held",
// and the reason it was released for, in the order seen. A hold that
// another takes over is released in the transaction that replaces its
// row, so it is seen held and then no more.
type holdWatch struct {
	mu      sync.Mutex
	seen    map[string]map[string][]string
	samples int
	err     error
}

// watchHolds samples the table at dbURL until the function it returns is
// called.
func watchHolds(ctx context.Context, dbURL string) (*holdWatch, func()) {
	w := &holdWatch{seen: map[string]map[string][]string{}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			w.err = err
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		// A sample every 10 ms: the table as it changes, without taking
		// the machine from the replicas.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for ; ctx.Err() == nil; <-tick.C {
			rows, err := conn.Query(ctx, `SELECT run_id, hold_id, CASE WHEN released_at IS NULL THEN 'held' ELSE reason END FROM held_sessions`)
			if err == nil {
				var run, hold, state string
				_, err = pgx.ForEachRow(rows, []any{&run, &hold, &state}, func() error {
					w.note(run, hold, state)
					return nil
				})
			}
			w.mu.Lock()
			if err != nil && ctx.Err() == nil {
				w.err = err
			}
			w.samples++
			w.mu.Unlock()
		}
	}()
	return w, func() { cancel(); <-done }
}

// note records a hold's state when it is new or changed.
func (w *holdWatch) note(run, hold, state string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	holds := w.seen[run]
	if holds == nil {
		holds = map[string][]string{}
		w.seen[run] = holds
	}
	if states := holds[hold]; len(states) == 0 || states[len(states)-1] != state {
		holds[hold] = append(states, state)
	}
}

// heldMetric is a replica's usher_assistant_held_sessions.
func heldMetric(t *testing.T, p *process) int {
	t.Helper()
	_, body := get(t, p.url+"/metrics", "")
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "usher_assistant_held_sessions "); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatal("no usher_assistant_held_sessions in /metrics")
	return 0
}

// TestTwoReplicasNeverHoldOneRun: two replicas on PostgreSQL, 30 runs,
// each with a turn through one replica and then one through the other,
// both calling a tool, so that runs move between the replicas' held MCP
// sessions. At rest, every run is held once: each replica holds exactly
// the sessions the durable hold table names it for, one per run; then,
// each run completed (through either replica), no replica holds anything
// and the table has every hold released by its completion. Throughout, a
// watcher of the table saw every hold released once: never held again,
// never released for a second reason.
func TestTwoReplicasNeverHoldOneRun(t *testing.T) {
	t.Parallel()
	const runs = 30
	c := newFaultCluster(t, testenv.Usher(t), 0, "USHER_ASSISTANT_MAX_ACTIVE_RUNS=100")
	a, b := c.start("a"), c.start("b")
	c.lb.set(a.url, b.url)
	c.signIn()
	replicas := []*process{a, b}
	watch, stopWatch := watchHolds(t.Context(), c.db.url)
	defer stopWatch()

	ids := make([]string, runs)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 6 {
		wg.Go(func() {
			for i := range work {
				first, second := replicas[i%2], replicas[(i+1)%2]
				code, run := apitest.Call(t, "POST", first.url+"/api/assistant/runs", c.token, fmt.Sprintf(`{"title":"run %d"}`, i))
				if code != 201 {
					t.Errorf("create = %d %v", code, run)
					continue
				}
				ids[i] = run["runId"].(string)
				for n, p := range []*process{first, second} {
					u := p.url + "/api/assistant/runs/" + ids[i] + "/messages?wait=60s"
					code, body := apitest.Call(t, "POST", u, c.token, fmt.Sprintf(`{"content":"tool %d of run %d"}`, n, i))
					if code != 200 || body["status"] != "completed" {
						t.Errorf("run %d, turn %d = %d %v", i, n, code, body)
					}
				}
			}
		})
	}
	for i := range runs {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// At rest: each replica holds what the table names it for, one
	// holder per run.
	byReplica := func() map[string]int {
		conn, err := pgx.Connect(t.Context(), c.db.url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.WithoutCancel(t.Context()))
		rows, _ := conn.Query(t.Context(), `SELECT replica, count(*) FROM held_sessions WHERE released_at IS NULL GROUP BY replica`)
		out := map[string]int{}
		var replica string
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&replica, &n}, func() error { out[replica] = n; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	var heldA, heldB int
	var table map[string]int
	func() {
		defer func() {
			if t.Failed() {
				t.Logf("held by a %d, b %d; the table: %v", heldA, heldB, table)
			}
		}()
		testenv.WaitFor(t, 10*time.Second, func() bool {
			heldA, heldB, table = heldMetric(t, a), heldMetric(t, b), byReplica()
			counts := []int{}
			total := 0
			for _, n := range table {
				counts = append(counts, n)
				total += n
			}
			// The table names each replica by its id, unknown here: its
			// two counts are the two replicas'.
			matches := len(counts) == 2 && ((counts[0] == heldA && counts[1] == heldB) || (counts[0] == heldB && counts[1] == heldA))
			return heldA+heldB == runs && total == runs && matches
		})
	}()

	// Completed, through either replica: nothing held any more.
	for i, id := range ids {
		if code, body := apitest.Call(t, "POST", replicas[i%2].url+"/api/assistant/runs/"+id+"/complete", c.token, ""); code != 200 {
			t.Fatalf("complete %s = %d %v", id, code, body)
		}
	}
	testenv.WaitFor(t, 10*time.Second, func() bool {
		heldA, heldB = heldMetric(t, a), heldMetric(t, b)
		return heldA == 0 && heldB == 0
	})
	var released, completed int
	queryRow(t, c.db.url, `SELECT count(*) FILTER (WHERE released_at IS NOT NULL), count(*) FILTER (WHERE reason = 'completed') FROM held_sessions`, nil, &released, &completed)
	if released != runs || completed != runs {
		t.Errorf("hold table: %d released, %d by completion; want %d and %d", released, completed, runs, runs)
	}

	stopWatch()
	if watch.err != nil {
		t.Fatalf("watching the hold table: %v", watch.err)
	}
	holds, moved := 0, 0
	for _, id := range ids {
		for hold, states := range watch.seen[id] {
			holds++
			// Held, then released once; or replaced while held (another
			// hold of the run took its row over, releasing it in the
			// same transaction): a hold is never held again after its
			// release, nor released twice.
			if n := len(states); n > 2 || (n == 2 && states[0] != "held") {
				t.Errorf("run %s, hold %s: seen %v, want held and then released once", id, hold, states)
			}
		}
		if len(watch.seen[id]) > 1 {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("no run's session moved between holds in %d samples: the test exercised nothing", watch.samples)
	}
	t.Logf("%d runs, %d holds seen in %d samples of the table, %d runs held by more than one hold over their life", runs, holds, watch.samples, moved)
}
