package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testQueuedTrace: the trace context of the request that posts a message
// travels with the queued run: the claim returns it, a requeue of the
// run's own keeps it, the next post replaces it (an untraced one clears
// it), a repeated post with the same key leaves it, and a malformed one
// is refused.
func testQueuedTrace(t *testing.T, s store.Store) {
	ctx := t.Context()
	t1 := store.TraceContext{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", State: "usher=1,other=t61rcWkgMzE"}
	first := userMessage("hi")
	first.Trace = t1
	if r := mustOpenRun(t, s, "run-1", &first); r.QueuedTrace != t1 {
		t.Fatalf("OpenRun's run carries trace %+v, want %+v", r.QueuedTrace, t1)
	}
	claimed, err := s.ClaimRuns(ctx, "replica-a", 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].QueuedTrace != t1 {
		t.Fatalf("ClaimRuns = %+v, %v; want the run with trace %+v", claimed, err, t1)
	}
	// The runner hands the run back queued: the turn goes on, for the
	// same request.
	if _, _, err := s.EndLease(ctx, claimed[0].Lease(), store.Release{Requeue: true}); err != nil {
		t.Fatal(err)
	}
	claimed, err = s.ClaimRuns(ctx, "replica-b", 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].QueuedTrace != t1 {
		t.Fatalf("ClaimRuns after a requeue = %+v, %v; want trace %+v", claimed, err, t1)
	}

	t2 := store.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	second := userMessage("again")
	second.Trace = t2
	if _, r, err := s.PostMessage(ctx, "run-1", second); err != nil || r.QueuedTrace != t2 {
		t.Fatalf("PostMessage = %+v, %v; want trace %+v", r.QueuedTrace, err, t2)
	}
	if got, err := s.GetRun(ctx, "run-1"); err != nil || got.QueuedTrace != t2 {
		t.Fatalf("GetRun = %+v, %v; want trace %+v", got.QueuedTrace, err, t2)
	}
	if _, r, err := s.PostMessage(ctx, "run-1", userMessage("untraced")); err != nil || r.QueuedTrace != (store.TraceContext{}) {
		t.Fatalf("an untraced PostMessage leaves trace %+v, %v; want none", r.QueuedTrace, err)
	}
	keyed := userMessage("keyed")
	keyed.Trace = t1
	if _, r, _, err := s.PostMessageOnce(ctx, "run-1", keyed, "key-1"); err != nil || r.QueuedTrace != t1 {
		t.Fatalf("PostMessageOnce = %+v, %v; want trace %+v", r.QueuedTrace, err, t1)
	}
	keyed.Trace = t2
	if _, _, created, err := s.PostMessageOnce(ctx, "run-1", keyed, "key-1"); err != nil || created {
		t.Fatalf("PostMessageOnce again = created %v, %v", created, err)
	}
	if got, _ := s.GetRun(ctx, "run-1"); got.QueuedTrace != t1 {
		t.Fatalf("a repeated post changed the trace to %+v, want %+v", got.QueuedTrace, t1)
	}

	for name, tc := range map[string]store.TraceContext{
		"long traceparent":     {Parent: strings.Repeat("0", store.MaxTraceParent+1)},
		"long tracestate":      {Parent: t2.Parent, State: "k=" + strings.Repeat("v", store.MaxTraceState)},
		"control character":    {Parent: t2.Parent + "\n"},
		"not ASCII":            {Parent: t2.Parent, State: "k=é"},
		"state without parent": {State: "k=v"},
	} {
		bad := userMessage("bad")
		bad.Trace = tc
		if _, _, err := s.PostMessage(ctx, "run-1", bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PostMessage with a trace context of %s = %v, want ErrInvalid", name, err)
		}
		if _, _, err := s.OpenRun(ctx, store.Run{ID: "run-bad", Owner: queueOwner}, 5, &bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("OpenRun with a trace context of %s = %v, want ErrInvalid", name, err)
		}
	}
}
