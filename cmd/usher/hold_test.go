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
	cli, _, errOut := cliOn(dir)

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

// TestPersonCommandsInput: the commands about one person (hold, erase,
// export) print a principal id whole, however long (an Entra ID id is
// 149 characters), so that one copied from their output is the person's;
// refuse an id with spaces at its ends or a character that is not
// printable, without writing it to the terminal; refuse a blank --reason
// or --by; say when Usher keeps nothing of the id given; and a new
// reason keeps when and by whom the hold was placed.
func TestPersonCommandsInput(t *testing.T) {
	t.Parallel()
	entra := "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/v2.0|72f988bf-86f1-41af-91ab-2d7cd011db47|00000000-0000-0000-0000-00000000a11c"
	if len(entra) < 149 {
		t.Fatalf("the id is %d characters", len(entra))
	}
	dir := withNotes(t, entra)
	cli, out, errOut := cliOn(dir)

	if s, err := cli("hold", "place", entra, "--reason", "Matter 7", "--by", "legal: J. Doe"); err != nil || !strings.Contains(s, "placed a legal hold on "+entra+" (Matter 7)") || errOut.Len() != 0 {
		t.Fatalf("hold place = %q, %v; stderr %q", s, err, errOut.String())
	}
	s, err := cli("hold", "list")
	if err != nil {
		t.Fatal(err)
	}
	var listed string
	for line := range strings.Lines(s) {
		if f := strings.Fields(line); len(f) > 0 && f[0] != "PRINCIPAL" {
			listed = f[0]
		}
	}
	if listed != entra {
		t.Fatalf("hold list names %q, want the whole id", listed)
	}
	if s, err := cli("hold", "place", listed, "--reason", "Matter 7 and 9", "--by", "counsel"); err != nil ||
		!strings.Contains(s, "the legal hold on "+entra+" (placed ") || !strings.Contains(s, " by legal: J. Doe) now has the reason Matter 7 and 9") {
		t.Errorf("hold place again = %q, %v", s, err)
	}
	if _, err := cli("erase", listed); err == nil || !strings.Contains(err.Error(), entra+" is under a legal hold") {
		t.Errorf("erase of the id copied from the list = %v, want the hold named", err)
	}
	if s, err := cli("hold", "lift", listed); err != nil || !strings.Contains(s, "lifted the legal hold on "+entra) {
		t.Errorf("hold lift of the id copied from the list = %q, %v", s, err)
	}

	for _, args := range [][]string{
		{"hold", "place", entra + " ", "--reason", "x"}, {"hold", "place", " " + entra, "--reason", "x"},
		{"erase", "evil\x1b[31mred\rX"}, {"export", "alice\u202e"}, {"hold", "lift", "a\x00b"},
		{"hold", "place", entra, "--reason", "   "}, {"hold", "place", entra, "--reason", "x", "--by", ""},
		{"hold", "lift", entra, "--by", " "},
	} {
		if _, err := cli(args...); !errors.Is(err, errUsage) {
			t.Errorf("usher %q = %v, want a usage error", args, err)
		}
		if strings.ContainsAny(out.String()+errOut.String(), "\x1b\r\x00\u202e") {
			t.Errorf("usher %q wrote a control character: %q", args, out.String()+errOut.String())
		}
	}

	for nobody, args := range map[string][]string{
		"issuer|tenant|nobody-1": {"erase", "issuer|tenant|nobody-1"},
		"issuer|tenant|nobody-2": {"export", "issuer|tenant|nobody-2"},
		"issuer|tenant|nobody-3": {"hold", "place", "issuer|tenant|nobody-3", "--reason", "x"},
	} {
		if _, err := cli(args...); err != nil || !strings.Contains(errOut.String(), "note: Usher keeps nothing of "+nobody) {
			t.Errorf("usher %q = %v; stderr %q, want a note that nothing names the id", args, err, errOut.String())
		}
	}
	if _, err := cli("export", entra); err != nil || strings.Contains(errOut.String(), "note:") {
		t.Errorf("export of a person = %v; stderr %q, want no note", err, errOut.String())
	}
}

// cliOn returns a function that runs one usher command on the
// installation in dir and returns its standard output, and the buffers
// that hold the last command's standard output and error.
func cliOn(dir string) (cli func(args ...string) (string, error), out, errOut *bytes.Buffer) {
	out, errOut = new(bytes.Buffer), new(bytes.Buffer)
	return func(args ...string) (string, error) {
		out.Reset()
		errOut.Reset()
		err := run(context.Background(), append(args, "--data-dir", dir), getenv(nil), out, errOut)
		return out.String(), err
	}, out, errOut
}
