package status_test

import (
	"os"
	"time"

	"github.com/usherhq/usher/status"
)

// The text of `usher status`: the summary and the problems first, then
// the replicas, the upstreams, the queue, the approvals and the audit log.
func ExampleWriteText() {
	at := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	rep := status.Report{
		At:       at,
		Problems: []string{"upstream jira is down"},
		Replicas: []status.ReplicaStatus{
			{ID: "usher-7d9f-0a1b2c3d4e5f", Version: "v0.2.0", Addr: "10.1.0.7:8080", StartedAt: at.Add(-time.Hour), LastSeen: at.Add(-2100 * time.Millisecond)},
			{ID: "usher-7d9f-6a7b8c9d0e1f", Version: "v0.2.0", Addr: "10.1.0.8:8080", StartedAt: at.Add(-58 * time.Minute), LastSeen: at.Add(-4600 * time.Millisecond)},
		},
		Upstreams: []status.Upstream{
			{Name: "github", State: status.StateUp, LastOK: at.Add(-3 * time.Second), Replicas: []status.UpstreamOnReplica{{State: status.StateUp}, {State: status.StateUp}}},
			{Name: "jira", State: status.StateDown, Error: "connection refused", Replicas: []status.UpstreamOnReplica{{State: status.StateDown}, {State: status.StateUnknown}}},
		},
		Queue:      status.Queue{Queued: 2, Running: 1, OldestQueuedAt: at.Add(-12 * time.Second)},
		Approvals:  status.Approvals{Pending: 1, Oldest: &status.PendingApproval{Tool: "notes_write", RequestedAt: at.Add(-5 * time.Minute)}},
		Checkpoint: &status.Checkpoint{Seq: 42, At: at.Add(-30 * time.Second)},
	}
	if err := status.WriteText(os.Stdout, rep); err != nil {
		panic(err)
	}
	// Output:
	// Usher at 2026-12-06 07:00:00 UTC: 2 replicas alive, 1 of 2 upstreams down, 2 runs queued, 1 approval pending
	//
	// PROBLEMS
	//   upstream jira is down
	//
	// REPLICA                  VERSION  ADDRESS        STARTED     LAST SEEN
	// usher-7d9f-0a1b2c3d4e5f  v0.2.0   10.1.0.7:8080  1h0m0s ago  2.1s ago
	// usher-7d9f-6a7b8c9d0e1f  v0.2.0   10.1.0.8:8080  58m0s ago   4.6s ago
	//
	// UPSTREAM  STATE  LAST OK  REPLICAS           ERROR
	// github    up     3s ago   2 up               -
	// jira      down   -        1 down, 1 unknown  connection refused
	//
	// QUEUE      2 queued, 1 running, oldest queued 12s ago
	// APPROVALS  1 pending, oldest 5m0s ago: notes_write
	// AUDIT      last checkpoint at seq 42, 30s ago (2026-12-06 06:59:30 UTC)
}
