package mcpserver

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
)

// sweepStart starts an upstream and a replica's client over st on a
// clock the test moves, and makes the client's first call: the shared
// session a sweep test sweeps.
func sweepStart(t *testing.T, st store.Store) (*statefulUpstream, time.Time, *testenv.Clock, *mcp.ClientSession) {
	t.Helper()
	up := newStatefulUpstream(t)
	start := time.Now()
	clk := testenv.NewClock(start)
	a, err := sharedClient(t, up, st, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := countOn(t, a); err != nil || got != "1" {
		t.Fatalf("the first call: %q, %v", got, err)
	}
	return up, start, clk, a
}

// sweepCatalog returns a replica's catalog over st, of the upstream up,
// on the clock now: what sweeps the shared sessions.
func sweepCatalog(t *testing.T, st store.Store, up *statefulUpstream, now func() time.Time) *Catalog {
	t.Helper()
	c, err := NewCatalog(&CatalogOptions{Runs: st, Approvals: st, UpstreamSessions: st, UpstreamSessionSecret: testSecret,
		Upstreams: []Upstream{{Name: "up", URL: up.url}}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openSessions counts the sessions the upstream holds open.
func (u *statefulUpstream) openSessions() int {
	n := 0
	for range u.server.Sessions() {
		n++
	}
	return n
}

// deleted returns how many DELETEs of a session the upstream was sent.
func (u *statefulUpstream) deleted() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.deletes
}

// aliceKey is the record key of alice's session to up.
func aliceKey(cat *Catalog) string {
	return cat.upstreams[0].sharedKey(connKey{upstream: "up", subject: alice})
}

// TestUpstreamSessionSweepEndsIdle: a shared session no replica has used
// for the idle time is ended upstream (a DELETE, its session gone) and
// its record deleted by a replica's sweep; one used more recently than
// that is not. The replica still holding the swept session recovers on
// its next call: one new session, the call run once.
func TestUpstreamSessionSweepEndsIdle(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up, start, clk, a := sweepStart(t, st)
		sweeper := sweepCatalog(t, other, up, clk.Now)
		idle := sweeper.upstreamSessionIdle()
		if idle <= sweeper.opts.IdleTimeout+sweeper.opts.CallTimeout {
			t.Errorf("the idle time %v does not exceed the pool's IdleTimeout and CallTimeout", idle)
		}

		clk.Set(start.Add(idle - time.Second))
		if n, err := sweeper.sweepUpstreamSessions(t.Context()); err != nil || n != 0 {
			t.Fatalf("a sweep before the session is idle long enough ended %d, %v; want none", n, err)
		}
		if open, deletes := up.openSessions(), up.deleted(); open != 1 || deletes != 0 {
			t.Fatalf("before it is idle long enough the upstream holds %d sessions and saw %d DELETEs; want 1, 0", open, deletes)
		}

		clk.Set(start.Add(idle + time.Second))
		if n, err := sweeper.sweepUpstreamSessions(t.Context()); err != nil || n != 1 {
			t.Fatalf("a sweep of the idle session ended %d, %v; want 1", n, err)
		}
		if open, deletes := up.openSessions(), up.deleted(); open != 0 || deletes != 1 {
			t.Errorf("after the sweep the upstream holds %d sessions and saw %d DELETEs; want 0, 1", open, deletes)
		}
		if _, err := st.GetUpstreamSession(t.Context(), aliceKey(sweeper)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the swept session's record: %v, want ErrNotFound", err)
		}

		// The replica still on the swept session meets the 404 and opens
		// a new one, on which its call runs once.
		if got, err := countOn(t, a); err != nil || got != "1" {
			t.Fatalf("the call after the sweep: %q, %v; want 1 on a new session", got, err)
		}
		if initializes, ran, ids := up.counts(); initializes != 2 || ran != 2 || len(ids) != 2 {
			t.Errorf("the upstream saw %d initializes, %d runs, %d sessions called; want 2, 2 (none lost or run twice), 2", initializes, ran, len(ids))
		}
		if _, err := st.GetUpstreamSession(t.Context(), aliceKey(sweeper)); err != nil {
			t.Errorf("the new session is not recorded: %v", err)
		}
	})
}

// TestUpstreamSessionSweepSparesUsed: a session that another replica used
// since the first stopped is not ended by a sweep that would have ended
// it idle from the first's use: the second replica's use moved the
// record's UsedAt forward. Both replicas go on on it.
func TestUpstreamSessionSweepSparesUsed(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up, start, clk, a := sweepStart(t, st)
		sweeper := sweepCatalog(t, st, up, clk.Now)
		idle := sweeper.upstreamSessionIdle()
		clk.Set(start.Add(idle - 2*time.Minute))
		b, err := sharedClient(t, up, other, clk.Now)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := countOn(t, b); err != nil || got != "2" {
			t.Fatalf("the second replica's call: %q, %v; want 2 on the shared session", got, err)
		}
		clk.Set(start.Add(idle + time.Second))
		if n, err := sweeper.sweepUpstreamSessions(t.Context()); err != nil || n != 0 {
			t.Fatalf("a sweep of a session used %v ago ended %d, %v; want none", 2*time.Minute, n, err)
		}
		if open, deletes := up.openSessions(), up.deleted(); open != 1 || deletes != 0 {
			t.Errorf("the upstream holds %d sessions and saw %d DELETEs; want 1, 0", open, deletes)
		}
		if got, err := countOn(t, a); err != nil || got != "3" {
			t.Errorf("the first replica's call after the sweep: %q, %v; want 3 on the same session", got, err)
		}
		if initializes, _, ids := up.counts(); initializes != 1 || len(ids) != 1 {
			t.Errorf("the upstream saw %d initializes, %d sessions called; want 1, 1", initializes, len(ids))
		}
	})
}

// TestUpstreamSessionSweepAtOnce: two replicas sweeping at once end an
// idle session once: one DELETE upstream.
func TestUpstreamSessionSweepAtOnce(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up, start, clk, _ := sweepStart(t, st)
		sweepers := []*Catalog{sweepCatalog(t, st, up, clk.Now), sweepCatalog(t, other, up, clk.Now)}
		clk.Set(start.Add(sweepers[0].upstreamSessionIdle() + time.Second))
		ended := make([]int, len(sweepers))
		errs := make([]error, len(sweepers))
		var ready, wg sync.WaitGroup
		ready.Add(len(sweepers))
		for i, c := range sweepers {
			wg.Go(func() {
				ready.Done()
				ready.Wait()
				ended[i], errs[i] = c.sweepUpstreamSessions(t.Context())
			})
		}
		wg.Wait()
		if errors.Join(errs...) != nil || ended[0]+ended[1] != 1 {
			t.Errorf("the sweeps ended %v, %v; want one session in all", ended, errs)
		}
		if open, deletes := up.openSessions(), up.deleted(); open != 0 || deletes != 1 {
			t.Errorf("the upstream holds %d sessions and saw %d DELETEs; want 0, 1", open, deletes)
		}
	})
}

// TestUpstreamSessionSweepEndedRecord: a record that has ended (its
// lifetime over) is not deleted as another record is written, which would
// lose the only handle to its session: the sweep ends the session
// upstream, then deletes the record.
func TestUpstreamSessionSweepEndedRecord(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up, start, clk, _ := sweepStart(t, st)
		// A day and an hour later another caller's session is recorded.
		later := start.Add(upstreamSessionLifetime + time.Hour)
		clk.Set(later)
		if _, err := other.PutUpstreamSession(t.Context(), store.UpstreamSession{Key: "another", Session: "sealed",
			ProtocolVersion: "2025-11-25", InitializeResult: []byte(`{}`), CreatedAt: later, ExpiresAt: later.Add(time.Hour)}, ""); err != nil {
			t.Fatal(err)
		}
		sweeper := sweepCatalog(t, other, up, clk.Now)
		if n, err := sweeper.sweepUpstreamSessions(t.Context()); err != nil || n != 1 {
			t.Fatalf("the sweep ended %d, %v; want the ended record's session", n, err)
		}
		if open, deletes := up.openSessions(), up.deleted(); open != 0 || deletes != 1 {
			t.Errorf("the upstream holds %d sessions and saw %d DELETEs; want 0, 1", open, deletes)
		}
		if _, err := st.GetUpstreamSession(t.Context(), aliceKey(sweeper)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the ended record after the sweep: %v, want ErrNotFound", err)
		}
		if _, err := st.GetUpstreamSession(t.Context(), "another"); err != nil {
			t.Errorf("the other record, in use: %v", err)
		}
	})
}

// TestUpstreamSessionSweepSparesCallInFlight: a session a call of a
// replica is on is not ended however long the call is quiet (one held
// open for its caller's answers sends nothing while it waits): each
// minute the replica moves the record's UsedAt forward. Once the call
// has ended, the session is ended when idle.
func TestUpstreamSessionSweepSparesCallInFlight(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up := newStatefulUpstream(t)
		start := time.Now()
		clk := testenv.NewClock(start)
		cs, shared, err := sharedClientOn(t, up, st, clk.Now)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := countOn(t, cs); err != nil || got != "1" {
			t.Fatalf("the first call: %q, %v", got, err)
		}
		// The replica holding the session has a call on it, and sweeps;
		// so does another.
		holder, sweeper := sweepCatalog(t, st, up, clk.Now), sweepCatalog(t, other, up, clk.Now)
		c := &conn{key: connKey{upstream: "up", subject: alice}, refs: 1}
		c.shared.Store(shared)
		holder.pool.mu.Lock()
		holder.pool.conns[c.key] = c
		holder.pool.mu.Unlock()
		tick := func() int {
			t.Helper()
			holder.touchSharedInUse(t.Context())
			n, err := sweeper.sweepUpstreamSessions(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		idle := sweeper.upstreamSessionIdle()
		for at := time.Minute; at <= 2*idle; at += time.Minute {
			clk.Set(start.Add(at))
			if n := tick(); n != 0 {
				t.Fatalf("%v into the call, a sweep ended the session it is on", at)
			}
		}
		holder.pool.mu.Lock()
		c.refs = 0
		holder.pool.mu.Unlock()
		ended := 0
		for at := 2*idle + time.Minute; at <= 4*idle && ended == 0; at += time.Minute {
			clk.Set(start.Add(at))
			ended = tick()
		}
		if open := up.openSessions(); ended != 1 || open != 0 {
			t.Errorf("once the call ended the sweeps ended %d sessions, the upstream holds %d; want 1, 0", ended, open)
		}
	})
}

// TestUpstreamSessionSweepRetriesFailedEnd: a sweep whose DELETE the
// upstream fails (503) puts the record back, still idle, so that the next
// sweep ends the session; a sweep that gives up would leave the session
// open upstream with nothing left to end it.
func TestUpstreamSessionSweepRetriesFailedEnd(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up, start, clk, _ := sweepStart(t, st)
		sweeper := sweepCatalog(t, other, up, clk.Now)
		before, err := st.GetUpstreamSession(t.Context(), aliceKey(sweeper))
		if err != nil {
			t.Fatal(err)
		}
		up.failDeletes.Store(1)
		clk.Set(start.Add(sweeper.upstreamSessionIdle() + time.Second))
		if n, err := sweeper.sweepUpstreamSessions(t.Context()); err != nil || n != 0 {
			t.Fatalf("a sweep whose DELETE failed ended %d, %v; want none", n, err)
		}
		back, err := st.GetUpstreamSession(t.Context(), aliceKey(sweeper))
		if err != nil || back.Session != before.Session || !back.ExpiresAt.Equal(before.ExpiresAt) {
			t.Fatalf("after the failed DELETE the record is %+v, %v; want it back as it was", back, err)
		}
		if open, deletes := up.openSessions(), up.deleted(); open != 1 || deletes != 1 {
			t.Fatalf("the upstream holds %d sessions and saw %d DELETEs; want 1, 1", open, deletes)
		}

		clk.Set(start.Add(sweeper.upstreamSessionIdle() + time.Minute + time.Second))
		if n, err := sweeper.sweepUpstreamSessions(t.Context()); err != nil || n != 1 {
			t.Fatalf("the next sweep ended %d, %v; want the session", n, err)
		}
		if open, deletes := up.openSessions(), up.deleted(); open != 0 || deletes != 2 {
			t.Errorf("the upstream holds %d sessions and saw %d DELETEs; want 0, 2", open, deletes)
		}
		if _, err := st.GetUpstreamSession(t.Context(), aliceKey(sweeper)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the record after the session ended: %v, want ErrNotFound", err)
		}
	})
}

// TestUpstreamSessionSweepEndsLongUsed: a shared session two replicas use
// for three days, longer than its record's first seal opens, stays one
// session upstream and is ended by the sweep once idle: a touch seals it
// anew when its seal has less than a lifetime left, and the other
// replica, whose seal the record then no longer holds, takes the new one
// (see sharedSession.adopt), so that its use alone keeps the session from
// the sweep. Without the new seal the sweep cannot open the record, and
// the session is left open upstream; without taking it, the second
// replica's use is not recorded and the sweep ends the session under it.
func TestUpstreamSessionSweepEndsLongUsed(t *testing.T) {
	onEngines(t, func(t *testing.T, st, other store.Store) {
		up, start, clk, a := sweepStart(t, st)
		b, err := sharedClient(t, up, other, clk.Now)
		if err != nil {
			t.Fatal(err)
		}
		calls := 1
		count := func(cs *mcp.ClientSession, who string) {
			t.Helper()
			calls++
			if got, err := countOn(t, cs); err != nil || got != strconv.Itoa(calls) {
				t.Fatalf("%s's call at %v: %q, %v; want %d on the one session", who, clk.Now().Sub(start), got, err, calls)
			}
		}
		count(b, "b")
		for h := 6; h <= 72; h += 6 {
			clk.Set(start.Add(time.Duration(h) * time.Hour))
			count(a, "a")
			count(b, "b")
		}
		last := start.Add(73 * time.Hour)
		clk.Set(last)
		count(b, "b")

		sweeper := sweepCatalog(t, other, up, clk.Now)
		idle := sweeper.upstreamSessionIdle()
		clk.Set(last.Add(idle - time.Minute))
		if n, err := sweeper.sweepUpstreamSessions(t.Context()); err != nil || n != 0 {
			t.Fatalf("a sweep while b still uses the session ended %d, %v; want none", n, err)
		}
		clk.Set(last.Add(idle + time.Second))
		if n, err := sweeper.sweepUpstreamSessions(t.Context()); err != nil || n != 1 {
			t.Fatalf("a sweep of the idle session ended %d, %v; want 1", n, err)
		}
		if open, deletes := up.openSessions(), up.deleted(); open != 0 || deletes != 1 {
			t.Errorf("after the sweep the upstream holds %d sessions and saw %d DELETEs; want 0, 1", open, deletes)
		}
		if initializes, ran, ids := up.counts(); initializes != 1 || ran != calls || len(ids) != 1 {
			t.Errorf("the upstream saw %d initializes, %d runs, %d sessions called; want 1, %d, 1", initializes, ran, len(ids), calls)
		}
	})
}
