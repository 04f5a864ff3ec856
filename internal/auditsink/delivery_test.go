package auditsink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// newDelivery returns the delivery of st's records to one target named
// name, with opts (nil: defaults) and st's records as its source.
func newDelivery(t *testing.T, st store.Store, name string, sink Sink, opts *Options) *Delivery {
	t.Helper()
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.Records = Records{Log: st}
	o.Logger = slog.New(slog.DiscardHandler)
	d, err := New(st, []Target{{Name: name, Sink: sink}}, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// passUntil runs passes of d's one target until done holds, at most max
// passes.
func passUntil(t *testing.T, d *Delivery, max int, done func() bool) {
	t.Helper()
	for range max {
		if done() {
			return
		}
		d.sinks[0].pass(t.Context())
	}
	if !done() {
		t.Fatalf("not done after %d passes", max)
	}
}

func newWebhook(t *testing.T, url string) *Webhook {
	t.Helper()
	w, err := NewWebhook(url, secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A healthy receiver gets every record exactly once, in order, each line
// as `usher audit export` writes it, in signed batches of bounded size;
// the lag goes from every record to none.
func TestWebhookDeliversEveryRecordOnce(t *testing.T) {
	for _, engine := range []struct {
		name string
		open func(testing.TB) store.Store
	}{{"SQLite", storetest.NewSQLite}, {"PostgreSQL", storetest.NewPostgres}} {
		t.Run(engine.name, func(t *testing.T) {
			st := engine.open(t)
			const n = 1234
			appendRecords(t, st, n)
			rc := newReceiver(t)
			srv := httptest.NewServer(rc)
			defer srv.Close()
			reg := prometheus.NewRegistry()
			// The passes run on this goroutine: the clock needs no lock.
			now := time.Now()
			d := newDelivery(t, st, "siem", newWebhook(t, srv.URL), &Options{BatchLines: 100, Registerer: reg, Now: func() time.Time { return now }})
			dl := d.sinks[0]
			dl.measure(t.Context())
			if got := testutil.ToFloat64(dl.lagRecords); got != n {
				t.Errorf("lag before delivery = %v records, want %d", got, n)
			}
			now = now.Add(time.Minute)
			dl.measure(t.Context())
			if got := testutil.ToFloat64(dl.lagSeconds); got < 60 {
				t.Errorf("lag before delivery = %vs, want at least 60", got)
			}
			passUntil(t, d, 10, func() bool { return cursor(t, st, "siem").DeliveredSeq == n })

			seqs, body := rc.received()
			if !slices.Equal(seqs, oneTo(n)) {
				t.Errorf("received %d records, not 1 to %d once each in order (first %v)", len(seqs), n, seqs[:min(len(seqs), 5)])
			}
			if !bytes.Equal(body, exported(t, st)) {
				t.Error("the lines received are not the export's")
			}
			for i, b := range rc.batches {
				if lines := bytes.Count(b, []byte("\n")); lines > 100 {
					t.Errorf("batch %d holds %d lines, want at most 100", i, lines)
				}
			}
			if got := testutil.ToFloat64(dl.lagRecords); got != 0 {
				t.Errorf("lag after delivery = %v records, want 0", got)
			}
			if got := testutil.ToFloat64(dl.lagSeconds); got != 0 {
				t.Errorf("lag after delivery = %vs, want 0", got)
			}
			if got := testutil.ToFloat64(dl.delivered); got != n {
				t.Errorf("usher_audit_sink_delivered_total = %v, want %d", got, n)
			}
			if count, err := testutil.GatherAndCount(reg, "usher_audit_sink_lag_records", "usher_audit_sink_lag_seconds"); err != nil || count != 2 {
				t.Errorf("the lag metrics gathered = %d, %v", count, err)
			}
		})
	}
}

// The receiver answers 503 with Retry-After, then refuses connections for
// an hour, then is back: nothing is sent before the Retry-After, the
// backoff stays bounded, the cursor stays put, and every record arrives.
func TestWebhookReceiverDown(t *testing.T) {
	st := storetest.NewSQLite(t)
	appendRecords(t, st, 40)
	rc := newReceiver(t)
	rc.answer = func(w http.ResponseWriter) bool {
		w.Header().Set("Retry-After", "120")
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return true
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := httptest.NewUnstartedServer(rc)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()

	// The passes run on this goroutine: the clock needs no lock.
	now := time.Now()
	const maxBackoff = 5 * time.Minute
	d := newDelivery(t, st, "siem", newWebhook(t, "http://"+addr), &Options{BatchLines: 25, Now: func() time.Time { return now }, MaxBackoff: maxBackoff})
	dl := d.sinks[0]
	dl.pass(t.Context())
	if rc.requests != 1 || cursor(t, st, "siem").DeliveredSeq != 0 {
		t.Fatalf("after a 503: %d requests, cursor %d; want 1 and 0", rc.requests, cursor(t, st, "siem").DeliveredSeq)
	}
	// Retry-After is honoured.
	now = now.Add(119 * time.Second)
	dl.pass(t.Context())
	if rc.requests != 1 {
		t.Fatalf("sent again %d times before the Retry-After", rc.requests-1)
	}
	// The receiver goes away: connections are refused for an hour, while
	// records keep coming.
	srv.Close()
	for range 60 {
		now = now.Add(time.Minute)
		appendRecords(t, st, 1)
		dl.pass(t.Context())
		if wait := dl.notBefore.Sub(now); wait > maxBackoff {
			t.Fatalf("backoff %s, over MaxBackoff %s", wait, maxBackoff)
		}
	}
	if got := cursor(t, st, "siem"); got.DeliveredSeq != 0 || got.HeadSeq != 100 {
		t.Fatalf("while the receiver was down: %+v, want the cursor at 0 and the head at 100", got)
	}
	if dl.failed < 5 {
		t.Fatalf("%d failures in a row in an hour, want the sends retried", dl.failed)
	}
	// It is back, healthy, on the same address.
	rc.answer = nil
	back, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	srv2 := httptest.NewUnstartedServer(rc)
	srv2.Listener.Close()
	srv2.Listener = back
	srv2.Start()
	defer srv2.Close()
	now = now.Add(maxBackoff)
	passUntil(t, d, 10, func() bool { return cursor(t, st, "siem").DeliveredSeq == 100 })
	seqs, _ := rc.received()
	if m := missing(seqs, 100); len(m) > 0 {
		t.Fatalf("records %v never arrived", m)
	}
}

// A process stopped after the receiver took a batch and before the
// cursor's write (its context ends as the batch arrives, as a kill -9
// would end it): another process, once the lease has lapsed, delivers
// that batch again and the rest; none is missing.
func TestDeliveryCutBeforeCursor(t *testing.T) {
	st := storetest.NewSQLite(t)
	const n = 30
	appendRecords(t, st, n)
	rc := newReceiver(t)
	srv := httptest.NewServer(rc)
	defer srv.Close()

	ctx, kill := context.WithCancel(t.Context())
	rc.answer = func(http.ResponseWriter) bool { kill(); return false }
	first := newDelivery(t, st, "siem", newWebhook(t, srv.URL), &Options{BatchLines: 10, LeaseFor: 2 * time.Second, Owner: "first"})
	first.sinks[0].pass(ctx)
	select {
	case <-rc.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver got no batch")
	}
	if seqs, _ := rc.received(); len(seqs) != 10 {
		t.Fatalf("the receiver got %d records, want the first batch of 10", len(seqs))
	}
	if got := cursor(t, st, "siem"); got.DeliveredSeq != 0 || got.LeaseOwner != "first" {
		t.Fatalf("after the cut: %+v, want the cursor at 0 and the first process's lease", got)
	}

	rc.answer = nil
	second := newDelivery(t, st, "siem", newWebhook(t, srv.URL), &Options{BatchLines: 10, LeaseFor: 2 * time.Second, Owner: "second"})
	testenv.WaitFor(t, 10*time.Second, func() bool {
		second.sinks[0].pass(t.Context())
		return cursor(t, st, "siem").DeliveredSeq == n
	})
	seqs, _ := rc.received()
	if m := missing(seqs, n); len(m) > 0 {
		t.Fatalf("records %v never arrived", m)
	}
	if !slices.Equal(seqs[:20], append(seqs[:10:10], seqs[:10]...)) {
		t.Errorf("the cut batch was not delivered again first: %v", seqs)
	}
	if owner := cursor(t, st, "siem").LeaseOwner; owner != "second" {
		t.Errorf("the lease is %q's, want the second process's", owner)
	}
}

// Two replicas on one PostgreSQL database, each delivering on its own
// loop while records are appended: the receiver never has two batches in
// flight, and gets every record exactly once.
func TestTwoReplicasDeliverOnce(t *testing.T) {
	dsn := storetest.PostgresURL(t)
	var stores []store.Store
	for range 2 {
		stores = append(stores, storetest.Migrated(t, dsn))
	}
	rc := newReceiver(t)
	srv := httptest.NewServer(rc)
	defer srv.Close()
	replicas := map[string]*Delivery{}
	for i, st := range stores {
		owner := []string{"a", "b"}[i]
		d := newDelivery(t, st, "siem", newWebhook(t, srv.URL), &Options{BatchLines: 7, Interval: 5 * time.Millisecond, Owner: owner})
		if err := d.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		replicas[owner] = d
	}
	const n = 300
	for range n / 20 {
		appendRecords(t, stores[0], 5)
		appendRecords(t, stores[1], 5)
	}
	// The replica delivering stops half way, giving its lease back: the
	// other takes over where it left.
	testenv.WaitFor(t, 30*time.Second, func() bool { seqs, _ := rc.received(); return len(seqs) >= n/2 })
	holder := cursor(t, stores[0], "siem").LeaseOwner
	if replicas[holder] == nil {
		t.Fatalf("the lease is held by %q, not a replica", holder)
	}
	replicas[holder].Stop()
	for range n / 20 {
		appendRecords(t, stores[0], 5)
		appendRecords(t, stores[1], 5)
	}
	testenv.WaitFor(t, 30*time.Second, func() bool { return cursor(t, stores[0], "siem").LeaseOwner != holder })
	testenv.WaitFor(t, 30*time.Second, func() bool { seqs, _ := rc.received(); return len(seqs) >= n })
	seqs, _ := rc.received()
	if !slices.Equal(seqs, oneTo(n)) {
		t.Errorf("received %d records, not 1 to %d once each in order", len(seqs), n)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.overlap {
		t.Error("two batches were in flight at once")
	}
}

// The file sink appends JSON lines; a restarted process resumes after the
// last line it wrote, without starting again from the first.
func TestFileSinkSurvivesRestart(t *testing.T) {
	st := storetest.NewSQLite(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	appendRecords(t, st, 12)
	sink, err := NewFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := newDelivery(t, st, "local", sink, nil)
	passUntil(t, d, 5, func() bool { return cursor(t, st, "local").DeliveredSeq == 12 })
	d.Stop()
	if got := cursor(t, st, "local"); got.LeaseOwner != "" {
		t.Errorf("the lease is %q's after Stop, want given back", got.LeaseOwner)
	}

	appendRecords(t, st, 8)
	again := newDelivery(t, st, "local", sink, nil)
	passUntil(t, again, 5, func() bool { return cursor(t, st, "local").DeliveredSeq == 20 })
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, exported(t, st)) {
		t.Errorf("the file is not the export of the 20 records, each once:\n%s", b)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the file's mode = %v, %v; want 0600", fi.Mode(), err)
	}
}

func TestFileSinkStdout(t *testing.T) {
	st := storetest.NewSQLite(t)
	appendRecords(t, st, 3)
	var out bytes.Buffer
	sink, err := NewFile(Stdout, &out)
	if err != nil {
		t.Fatal(err)
	}
	d := newDelivery(t, st, "stdout", sink, nil)
	passUntil(t, d, 5, func() bool { return cursor(t, st, "stdout").DeliveredSeq == 3 })
	if !bytes.Equal(out.Bytes(), exported(t, st)) {
		t.Errorf("standard output got %q", out.String())
	}
}

// A webhook's redirect is a failure: the secret is sent to the configured
// URL only.
func TestWebhookRefusesRedirects(t *testing.T) {
	rc := newReceiver(t)
	target := httptest.NewServer(rc)
	defer target.Close()
	redirect := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	defer redirect.Close()
	err := newWebhook(t, redirect.URL).Send(t.Context(), []byte("{\"seq\":1}\n"))
	if err == nil || !strings.Contains(err.Error(), "307") {
		t.Fatalf("Send to a redirect = %v, want a failure naming 307", err)
	}
	if rc.requests != 0 {
		t.Fatal("the redirect was followed")
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"30", 30 * time.Second, true},
		{"0", 0, true},
		{"99999999", MaxRetryAfter, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), MaxRetryAfter, true},
	} {
		got, ok := retryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("retryAfter(%q) = %s, %v; want %s, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	st := storetest.NewSQLite(t)
	sink, err := NewFile(filepath.Join(t.TempDir(), "a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		targets []Target
		opts    *Options
	}{
		{"duplicate names", []Target{{Name: "a", Sink: sink}, {Name: "a", Sink: sink}}, &Options{Records: Records{Log: st}}},
		{"bad name", []Target{{Name: "A b", Sink: sink}}, &Options{Records: Records{Log: st}}},
		{"no sink", []Target{{Name: "a"}}, &Options{Records: Records{Log: st}}},
		{"no source", []Target{{Name: "a", Sink: sink}}, nil},
		{"short lease", []Target{{Name: "a", Sink: sink}}, &Options{Records: Records{Log: st}, LeaseFor: time.Second}},
	} {
		if _, err := New(st, c.targets, c.opts); err == nil {
			t.Errorf("%s: New succeeded", c.name)
		}
	}
	for _, url := range []string{"http://siem.example/usher", "ftp://127.0.0.1/", "https://user:pw@siem.example/"} {
		if _, err := NewWebhook(url, secret, nil); err == nil {
			t.Errorf("NewWebhook(%q) succeeded", url)
		}
	}
	if _, err := NewWebhook("https://siem.example/usher", nil, nil); err == nil {
		t.Error("NewWebhook without a secret succeeded")
	}
	if !errors.Is(&RetryAfter{Err: context.Canceled}, context.Canceled) {
		t.Error("RetryAfter does not unwrap")
	}
}

// The audit log's signed checkpoints reach a sink beside its records, each
// once, as lines of kind audit_checkpoint carrying the signed note, with a
// cursor of their own: a checkpoint stored after its records were
// delivered is delivered all the same. Only the records' lag is measured.
func TestCheckpointsDeliveredBesideRecords(t *testing.T) {
	st := storetest.NewSQLite(t)
	appendRecords(t, st, 30)
	checkpoint := func(seq int64) store.AuditCheckpoint {
		t.Helper()
		recs, err := st.AuditRecords(t.Context(), seq-1, 1)
		if err != nil || len(recs) != 1 {
			t.Fatalf("record %d: %v", seq, err)
		}
		cp := store.AuditCheckpoint{Seq: seq, Hash: recs[0].Hash, At: time.Now().UTC().Truncate(time.Microsecond),
			Note: fmt.Sprintf("usher.example.com\n%d\n%s\n— usher.example.com sig%d\n", seq, recs[0].Hash, seq)}
		if err := st.InsertAuditCheckpoint(t.Context(), cp); err != nil {
			t.Fatal(err)
		}
		return cp
	}
	first := checkpoint(10)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := NewFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	records := Target{Name: "local", Sink: sink}
	reg := prometheus.NewRegistry()
	d, err := New(st, []Target{records, CheckpointsOf(records, st)}, &Options{
		Records: Records{Log: st}, Logger: slog.New(slog.DiscardHandler), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	passAll := func() {
		for _, dl := range d.sinks {
			dl.pass(t.Context())
		}
	}
	passAll()
	second := checkpoint(30) // after every record was delivered
	passAll()
	passAll()

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var records30, checkpoints []string
	for _, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		if strings.Contains(line, `"kind":"audit_checkpoint"`) {
			checkpoints = append(checkpoints, line)
		} else {
			records30 = append(records30, line)
		}
	}
	if want := strings.TrimSuffix(string(exported(t, st)), "\n"); strings.Join(records30, "\n") != want {
		t.Errorf("the records' lines are not the export's")
	}
	var want []string
	for _, cp := range []store.AuditCheckpoint{first, second} {
		line, err := audit.CheckpointLine(cp)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, strings.TrimSuffix(string(line), "\n"))
	}
	if !slices.Equal(checkpoints, want) {
		t.Errorf("checkpoint lines =\n%s\nwant\n%s", strings.Join(checkpoints, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(want[0], `"note":"usher.example.com\n10\n`) {
		t.Errorf("a checkpoint's line does not carry its signed note: %s", want[0])
	}
	if got := cursor(t, st, "local.checkpoints").DeliveredSeq; got != 30 {
		t.Errorf("the checkpoints' cursor = %d, want 30", got)
	}
	if count, err := testutil.GatherAndCount(reg, "usher_audit_sink_lag_records"); err != nil || count != 1 {
		t.Errorf("lag series = %d, %v; want the records' only", count, err)
	}
}
