package store_test

import (
	"fmt"
	"testing"

	"github.com/usherhq/usher/store"
)

// TestUpgradeToBranches: a run an older release stored — its events and
// its context snapshot — reads the same after the migration that brings
// branches: every event and the snapshot on the original line, which is
// active; and the run branches as a new one does.
func TestUpgradeToBranches(t *testing.T) {
	for _, e := range upgradeEngines {
		t.Run(e.name, func(t *testing.T) {
			ctx := t.Context()
			s := e.open(t)
			if err := store.MigrateTo(ctx, s, 11); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				fmt.Sprintf(`INSERT INTO runs (id, owner, status, last_seq, message_count, handled_seq, created_at, updated_at, last_activity_at)
					VALUES ('old', 'alice', 'InProgress', 2, 2, 1, %s, %s, %s)`, e.at, e.at, e.at),
				fmt.Sprintf(`INSERT INTO run_events (run_id, seq, type, payload, created_at) VALUES
					('old', 1, 'message.user', '{"content":"hi"}', %s),
					('old', 2, 'message.assistant', '{"content":"Hello.","messageSeq":1}', %s)`, e.at, e.at),
				fmt.Sprintf(`INSERT INTO context_snapshots (run_id, version, from_seq, to_seq, summary, tokens, kind, model, created_at)
					VALUES ('old', 1, 1, 2, 'a greeting', 3, 'automatic', 'demo', %s)`, e.at),
			} {
				if err := store.ExecRaw(ctx, s, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			r, err := s.GetRun(ctx, "old")
			if err != nil || r.ActiveBranch != 0 || r.Branches != 0 {
				t.Fatalf("the run after the upgrade = %+v, %v", r, err)
			}
			msgs, err := s.ListMessages(ctx, "old", store.MessageQuery{Limit: 10})
			if err != nil || len(msgs) != 2 || msgs[0].Branch != 0 || msgs[1].Branch != 0 {
				t.Fatalf("the messages after the upgrade = %+v, %v", msgs, err)
			}
			snap, err := s.LatestSnapshot(ctx, "old")
			if err != nil || snap.Version != 1 || snap.Summary != "a greeting" || snap.Branch != 0 || snap.ToSeq != 2 {
				t.Fatalf("the snapshot after the upgrade = %+v, %v", snap, err)
			}
			b, _, _, err := s.ForkRun(ctx, "old", store.Fork{At: 1, Kind: store.BranchEdit, Message: store.NewEvent{Type: store.EventUserMessage, Payload: []byte(`{"content":"hello"}`)}})
			if err != nil || b.ID != 1 || b.MessageSeq != 3 {
				t.Fatalf("ForkRun after the upgrade = %+v, %v", b, err)
			}
			if _, err := s.LatestSnapshot(ctx, "old"); err == nil {
				t.Error("the old snapshot applies to a branch that replaced the message it covers")
			}
		})
	}
}
