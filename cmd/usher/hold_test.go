package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
)

// TestHoldCommand: `usher hold place` keeps a person's data — `usher
// erase` then refuses, saying why, and erases nothing — and `hold list`
// shows the hold, as text and JSON; `hold lift` lifts it and the erasure
// goes ahead; lifting none, a placement without a reason and other
// malformed command lines fail and change nothing; each placement and
// lift is in the audit log.
func TestHoldCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const alice = "issuer|tenant|alice"
	dir := withNotes(t, alice)
	var out, errOut bytes.Buffer
	cli := func(args ...string) (string, error) {
		out.Reset()
		errOut.Reset()
		err := run(ctx, append(args, "--data-dir", dir), getenv(nil), &out, &errOut)
		return out.String(), err
	}

	if s, err := cli("hold", "place", alice, "--reason", "Matter 2026-114", "--by", "legal: J. Doe"); err != nil || !strings.Contains(s, "placed a legal hold on "+alice+" (Matter 2026-114)") {
		t.Fatalf("hold place = %q, %v\n%s", s, err, errOut.String())
	}
	if _, err := cli("erase", alice, "--yes"); err == nil || !strings.Contains(err.Error(), "under a legal hold") {
		t.Errorf("erase under a hold = %v, want a refusal that names the hold", err)
	}
	if s, err := cli("hold", "list"); err != nil || !strings.Contains(s, alice) || !strings.Contains(s, "legal: J. Doe") || !strings.Contains(s, "Matter 2026-114") {
		t.Errorf("hold list = %q, %v", s, err)
	}
	s, err := cli("hold", "list", "-json")
	var holds []store.LegalHold
	if err != nil || json.Unmarshal([]byte(s), &holds) != nil || len(holds) != 1 || holds[0].Principal != alice || holds[0].Reason != "Matter 2026-114" {
		t.Errorf("hold list -json = %q, %v", s, err)
	}
	st, err := store.Open(ctx, filepath.Join(dir, "usher.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetNote(ctx, alice, "todo"); err != nil {
		t.Errorf("the held person's note after a refused erasure: %v", err)
	}
	st.Close()

	for _, args := range [][]string{
		{"hold"}, {"hold", "keep", alice}, {"hold", "place", alice}, {"hold", "place", "--reason", "x"},
		{"hold", "lift"}, {"hold", "lift", "a", "b"}, {"hold", "list", "extra"},
	} {
		if _, err := cli(args...); !errors.Is(err, errUsage) {
			t.Errorf("usher %v = %v, want a usage error", args, err)
		}
	}
	if _, err := cli("hold", "lift", "issuer|tenant|bob"); err == nil || !strings.Contains(err.Error(), "under no legal hold") {
		t.Errorf("hold lift of no hold = %v", err)
	}
	if s, err := cli("hold", "lift", alice, "--by", "legal: J. Doe"); err != nil || !strings.Contains(s, "lifted the legal hold on "+alice) {
		t.Fatalf("hold lift = %q, %v", s, err)
	}
	if s, err := cli("hold", "list"); err != nil || s != "no legal holds\n" {
		t.Errorf("hold list after the lift = %q, %v", s, err)
	}
	if _, err := cli("erase", alice, "--yes"); err != nil {
		t.Errorf("erase after the lift = %v", err)
	}
	s, err = cli("audit", "export")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for line := range strings.Lines(s) {
		var rec struct{ Kind, Principal string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Principal == alice {
			kinds = append(kinds, rec.Kind)
		}
	}
	if got := strings.Join(kinds, " "); got != "legal_hold_placed legal_hold_lifted principal_erased" {
		t.Errorf("alice's audit records = %s", got)
	}
}
