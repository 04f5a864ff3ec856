package assistant

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/store"
)

// metricValue returns the value of reg's single series of the counter or
// gauge name, failing the test when there is not exactly one.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%s has %d series, want 1", name, len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		if m.Counter != nil {
			return m.Counter.GetValue()
		}
		return m.Gauge.GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestBacklogMetrics reads the backlog gauges from the database on both
// engines: two runs queued, one running, one approval pending, with the
// ages of the oldest.
func TestBacklogMetrics(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		first := openRun(t, st, "run_b1", "one")
		openRun(t, st, "run_b2", "two")
		openRun(t, st, "run_b3", "three")
		if claimed, err := st.ClaimRuns(ctx, "replica-a", 1, time.Hour); err != nil || len(claimed) != 1 || claimed[0].ID != first.ID {
			t.Fatalf("ClaimRuns = %+v, %v", claimed, err)
		}
		second, err := st.GetRun(ctx, "run_b2")
		if err != nil {
			t.Fatal(err)
		}
		requested := time.Now().Add(-time.Minute).Truncate(time.Second)
		if _, _, err := st.CreateApprovalAudited(ctx, store.Approval{
			ID: "appr_b1", Arguments: []byte(`{}`), CreatedAt: requested, ExpiresAt: requested.Add(time.Hour),
			Binding: store.ApprovalBinding{Principal: testOwner.ID(), Tool: "notes_write", DefinitionHash: "d", ArgumentsHash: "a", PolicyHash: "p", RunID: "run_b3"},
		}, nil); err != nil {
			t.Fatal(err)
		}
		now := second.QueuedAt.Add(90 * time.Second)
		reg := prometheus.NewRegistry()
		reg.MustRegister(BacklogCollector(st, func() time.Time { return now }, nil))
		for name, want := range map[string]float64{
			"usher_runs_queued":                          2,
			"usher_runs_running":                         1,
			"usher_runs_oldest_queued_age_seconds":       90,
			"usher_approvals_pending":                    1,
			"usher_approvals_oldest_pending_age_seconds": now.Sub(requested).Seconds(),
		} {
			if got := metricValue(t, reg, name); got != want {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
	})
}
