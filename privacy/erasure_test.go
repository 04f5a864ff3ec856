package privacy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// twoPeople returns a store with, for alice and for bob, a note of each
// name ("the note of" its owner) and a run whose message is "hello from"
// its owner, and an audit log on it.
func twoPeople(t *testing.T, notes ...string) (store.Store, *audit.Log) {
	t.Helper()
	ctx := t.Context()
	st := storetest.NewSQLite(t)
	log, err := audit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"alice", "bob"} {
		for _, name := range notes {
			if _, err := st.PutNote(ctx, store.Note{Owner: p, Name: name, Body: "the note of " + p}); err != nil {
				t.Fatal(err)
			}
		}
		first := store.NewEvent{Type: "message.user", Payload: json.RawMessage(`{"content":"hello from ` + p + `"}`)}
		if _, _, err := st.OpenRun(ctx, store.Run{ID: "run-" + p, Owner: p}, 5, &first); err != nil {
			t.Fatal(err)
		}
	}
	return st, log
}

// TestErase: a dry run counts what an erasure would erase and leaves it
// all; the erasure erases it, once, with a principal_erased record that
// counts it and says by what; another person's data stays.
func TestErase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, log := twoPeople(t, "todo")

	dry, err := Erase(ctx, st, log, "alice", "usher erase", true)
	if err != nil || dry.Runs != 1 || dry.Notes != 1 || dry.Principal != "alice" {
		t.Fatalf("dry run = %+v, %v; want one run and one note counted", dry, err)
	}
	if _, err := st.GetNote(ctx, "alice", "todo"); err != nil {
		t.Errorf("alice's note after the dry run: %v, want it there", err)
	}
	if _, err := st.GetRun(ctx, "run-alice"); err != nil {
		t.Errorf("alice's run after the dry run: %v, want it there", err)
	}
	if recs, _ := st.AuditRecords(ctx, 0, 100); len(recs) != 0 {
		t.Errorf("%d audit records after the dry run, want none", len(recs))
	}

	done, err := Erase(ctx, st, log, "alice", "usher erase", false)
	if err != nil || done != dry {
		t.Fatalf("erasure = %+v, %v; want what the dry run counted, %+v", done, err, dry)
	}
	if _, err := st.GetNote(ctx, "alice", "todo"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("alice's note after the erasure: %v, want gone", err)
	}
	if _, err := st.GetNote(ctx, "bob", "todo"); err != nil {
		t.Errorf("bob's note after alice's erasure: %v", err)
	}
	recs, err := st.AuditRecords(ctx, 0, 100)
	if err != nil || len(recs) != 1 {
		t.Fatalf("audit records after the erasure: %d, %v; want one", len(recs), err)
	}
	var d struct {
		Runs, Notes int64
		By          string
	}
	if r := recs[0]; r.Kind != string(audit.KindPrincipalErased) || r.Principal != "alice" || json.Unmarshal(r.Details, &d) != nil || d.Runs != 1 || d.Notes != 1 || d.By != "usher erase" {
		t.Errorf("the erasure's record = %+v (details %+v)", r, d)
	}
	if again, err := Erase(ctx, st, log, "alice", "usher erase", false); err != nil || again.Runs != 0 || again.Notes != 0 {
		t.Errorf("a second erasure = %+v, %v; want nothing erased", again, err)
	}
}

func TestWriteText(t *testing.T) {
	t.Parallel()
	e := store.PrincipalErasure{Principal: "alice", Runs: 3, Notes: 2, OAuth: 1, UsageDays: 1}
	for _, dry := range []bool{true, false} {
		var b bytes.Buffer
		if err := WriteText(&b, e, dry); err != nil {
			t.Fatal(err)
		}
		verb := map[bool]string{true: "would erase 3 conversations", false: "erased 3 conversations"}[dry]
		if !strings.HasPrefix(b.String(), verb) || !strings.Contains(b.String(), ", 2 notes, 0 attachments,") ||
			!strings.Contains(b.String(), ", 1 day of model usage,") || !strings.Contains(b.String(), ", 1 OAuth code, token or consent,") ||
			strings.Contains(b.String(), "alice") {
			t.Errorf("WriteText(dry %v) = %q", dry, b.String())
		}
	}
}
