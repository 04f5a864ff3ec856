package audit_test

import (
	"crypto/rand"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/seal"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
)

// origin names the test's log in its checkpoints and keys.
const origin = "usher.test"

// newSealKey returns a random seal key, as broker.LoadOrCreateSealKey
// makes one.
func newSealKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// installation is what one Usher process checkpoints with.
type installation struct {
	keys *audit.Keys
	cp   *audit.Checkpointer
	clk  *clock
}

func newInstallation(t *testing.T, st store.Store, sealKey []byte, clk *clock) installation {
	t.Helper()
	keys, err := audit.NewKeys(st, sealKey, origin, &audit.KeysOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := audit.NewCheckpointer(st, keys, &audit.CheckpointerOptions{Origin: origin, Interval: time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return installation{keys: keys, cp: cp, clk: clk}
}

// checkpoint checkpoints a minute later and requires a checkpoint at seq.
func (in installation) checkpoint(t *testing.T, seq int64) store.AuditCheckpoint {
	t.Helper()
	in.clk.advance(time.Minute)
	cp, written, err := in.cp.Checkpoint(t.Context())
	if err != nil || !written || cp.Seq != seq {
		t.Fatalf("Checkpoint = %+v, %v, %v; want one written at seq %d", cp, written, err, seq)
	}
	return cp
}

// trusted returns the keys in.keys publishes, as a reviewer keeps them.
func (in installation) trusted(t *testing.T) note.Verifiers {
	t.Helper()
	list, err := in.keys.VerifierKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	v, err := audit.ParseVerifierKeys(strings.Join(list, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// appendRounds appends entries() n times: 6n records.
func appendRounds(t *testing.T, st store.Store, n int) {
	t.Helper()
	for range n {
		appendAll(t, st)
	}
}

func verifyCheckpoints(t *testing.T, st store.Store, keys note.Verifiers) audit.Report {
	t.Helper()
	rep, err := audit.VerifyWithCheckpoints(t.Context(), st, keys)
	if err != nil {
		t.Fatalf("VerifyWithCheckpoints: %v", err)
	}
	return rep
}

// TestCheckpointTampering: each way of tampering with the log or its
// checkpoints is reported at the sequence number it shows at.
func TestCheckpointTampering(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, dsn string, db *sql.DB)
		want   audit.Problem
	}{
		{"record edited in the middle", func(t *testing.T, _ string, db *sql.DB) {
			exec(t, db, `UPDATE audit_log SET tool = 'other' WHERE seq = 15`)
		}, audit.Problem{Seq: 15, Kind: audit.ProblemEdited}},
		{"last 10 records deleted", func(t *testing.T, _ string, db *sql.DB) {
			exec(t, db, `DELETE FROM audit_log WHERE seq > 20`)
		}, audit.Problem{Seq: 30, Kind: audit.ProblemCheckpoint}},
		{"log rewritten, checkpoints left", func(t *testing.T, dsn string, db *sql.DB) {
			rewrite(t, dsn, db)
		}, audit.Problem{Seq: 12, Kind: audit.ProblemCheckpoint}},
		{"log and checkpoints rewritten", func(t *testing.T, dsn string, db *sql.DB) {
			st := rewrite(t, dsn, db)
			exec(t, db, `DELETE FROM audit_checkpoints`)
			// Whoever holds the database replaces the key with one of
			// their own and signs a checkpoint of their chain, stored as
			// Usher's are: only the keys published before give it away.
			exec(t, db, `DELETE FROM signing_keys WHERE purpose = 'audit'`)
			forger := newInstallation(t, st, newSealKey(), newManualClock())
			forger.checkpoint(t, 30)
		}, audit.Problem{Seq: 30, Kind: audit.ProblemCheckpointSignature}},
		{"checkpoint signature altered", func(t *testing.T, _ string, db *sql.DB) {
			var signed string
			if err := db.QueryRowContext(t.Context(), `SELECT note FROM audit_checkpoints WHERE seq = 12`).Scan(&signed); err != nil {
				t.Fatal(err)
			}
			// The signature's last base64 character before the newline.
			i := len(signed) - 2
			c := byte('A')
			if signed[i] == 'A' {
				c = 'B'
			}
			exec(t, db, `UPDATE audit_checkpoints SET note = $1 WHERE seq = 12`, signed[:i]+string(c)+signed[i+1:])
		}, audit.Problem{Seq: 12, Kind: audit.ProblemCheckpointSignature}},
		{"checkpoint moved to another record", func(t *testing.T, _ string, db *sql.DB) {
			exec(t, db, `UPDATE audit_checkpoints SET seq = 13 WHERE seq = 12`)
		}, audit.Problem{Seq: 13, Kind: audit.ProblemCheckpointSignature}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachDSN(t, func(t *testing.T, dsn string) {
				st := openStore(t, dsn)
				db := openEngineDB(t, dsn)
				in := newInstallation(t, st, newSealKey(), newManualClock())
				appendRounds(t, st, 2)
				in.checkpoint(t, 12)
				appendRounds(t, st, 3)
				in.checkpoint(t, 30)
				trusted := in.trusted(t)
				rep := verifyCheckpoints(t, st, trusted)
				if !rep.Intact() || rep.Checkpoints != 2 || rep.LastCheckpoint.Seq != 30 || rep.LastCheckpoint.Origin != origin {
					t.Fatalf("VerifyWithCheckpoints before tampering = %+v, want intact with 2 checkpoints, the last of seq 30", rep)
				}
				if problems, n := verifyInSteps(t, st, trusted, 7); len(problems) != 0 || n != 2 {
					t.Fatalf("VerifyFromWithCheckpoints in steps before tampering: %v, %d checkpoints; want none, 2", problems, n)
				}

				tt.tamper(t, dsn, db)
				rep = verifyCheckpoints(t, st, trusted)
				found := false
				for _, p := range rep.Problems {
					found = found || (p.Seq == tt.want.Seq && p.Kind == tt.want.Kind)
				}
				if rep.Intact() || !found {
					t.Errorf("VerifyWithCheckpoints after tampering found %v, want %s at seq %d", rep.Problems, tt.want.Kind, tt.want.Seq)
				}
				// In steps of 7 records, as the reviewers' API verifies, the
				// same problem is found in one of them.
				problems, _ := verifyInSteps(t, st, trusted, 7)
				if !slices.ContainsFunc(problems, func(p audit.Problem) bool { return p.Seq == tt.want.Seq && p.Kind == tt.want.Kind }) {
					t.Errorf("VerifyFromWithCheckpoints in steps after tampering found %v, want %s at seq %d", problems, tt.want.Kind, tt.want.Seq)
				}
			})
		})
	}
}

// verifyInSteps verifies the log with VerifyFromWithCheckpoints in steps
// of limit records, each from the head the one before reached, and returns
// the problems of every step and how many checkpoints verified in all.
func verifyInSteps(t *testing.T, st audit.CheckpointReader, keys note.Verifiers, limit int64) ([]audit.Problem, int64) {
	t.Helper()
	var problems []audit.Problem
	var checkpoints int64
	from := store.AuditHead{}
	for range 100 {
		rep, done, err := audit.VerifyFromWithCheckpoints(t.Context(), st, keys, from, limit)
		if err != nil {
			t.Fatal(err)
		}
		problems, checkpoints = append(problems, rep.Problems...), checkpoints+rep.Checkpoints
		if done {
			return problems, checkpoints
		}
		from = rep.Head
	}
	t.Fatal("verification in steps did not reach the head")
	return nil, 0
}

// rewrite replaces the whole log with another one whose chain holds
// together, of as many records, and returns the store that wrote it.
func rewrite(t *testing.T, dsn string, db *sql.DB) store.Store {
	t.Helper()
	exec(t, db, `DELETE FROM audit_log`)
	// A store of its own: a process that appended to the log does not
	// start it again at 1 when it is emptied.
	st := openStore(t, dsn)
	log, err := audit.New(st, &audit.Options{Now: newClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		if err := log.Append(t.Context(), audit.Entry{Kind: audit.KindDecision, Tool: "innocent", Decision: "allow"}); err != nil {
			t.Fatal(err)
		}
	}
	if rep := verify(t, st); !rep.Intact() || rep.Head.Seq != 30 {
		t.Fatalf("the rewritten log = %+v, want an intact chain of 30 records", rep)
	}
	return st
}

func exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestCheckpointInterval: a checkpoint is written only when records were
// appended since the last, and never sooner than the interval after it.
func TestCheckpointInterval(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		clk := newManualClock()
		in := newInstallation(t, st, newSealKey(), clk)
		pass := func() (store.AuditCheckpoint, bool) {
			t.Helper()
			cp, written, err := in.cp.Checkpoint(t.Context())
			if err != nil {
				t.Fatalf("Checkpoint: %v", err)
			}
			return cp, written
		}
		if _, written := pass(); written {
			t.Error("Checkpoint of an empty log wrote one")
		}
		appendAll(t, st)
		if cp, written := pass(); !written || cp.Seq != 6 || !cp.At.Equal(clk.Now()) {
			t.Errorf("Checkpoint after 6 records = %+v, %v; want one of seq 6 at %v", cp, written, clk.Now())
		}
		appendAll(t, st)
		clk.advance(59 * time.Second)
		if _, written := pass(); written {
			t.Error("Checkpoint 59s after the last wrote one, want none before the interval")
		}
		clk.advance(time.Second)
		if cp, written := pass(); !written || cp.Seq != 12 {
			t.Errorf("Checkpoint an interval after the last = %+v, %v; want one of seq 12", cp, written)
		}
		clk.advance(10 * time.Minute)
		if _, written := pass(); written {
			t.Error("Checkpoint with no record since the last wrote one")
		}
		list, err := st.ListAuditCheckpoints(t.Context(), 0, 10)
		if err != nil || len(list) != 2 {
			t.Errorf("stored checkpoints = %+v, %v; want 2", list, err)
		}
	})
}

// TestCheckpointersShareOneDatabase: two installations on one database,
// as two replicas starting together, make one key between them, and sign
// one checkpoint of a head.
func TestCheckpointersShareOneDatabase(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		sealKey := newSealKey()
		clk := newManualClock()
		sts := []store.Store{openStore(t, dsn), openStore(t, dsn)}
		ins := []installation{newInstallation(t, sts[0], sealKey, clk), newInstallation(t, sts[1], sealKey, clk)}

		// Both make the first key at once.
		signers := make([]note.Signer, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, in := range ins {
			wg.Go(func() { signers[i], errs[i] = in.keys.Signer(t.Context()) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("Signer: %v", err)
		}
		if signers[0].KeyHash() != signers[1].KeyHash() {
			t.Errorf("the installations sign with keys %08x and %08x, want one key", signers[0].KeyHash(), signers[1].KeyHash())
		}
		for i, in := range ins {
			if list, err := in.keys.VerifierKeys(t.Context()); err != nil || len(list) != 1 {
				t.Errorf("installation %d publishes %q, %v; want one key", i, list, err)
			}
		}

		appendAll(t, sts[0])
		clk.advance(time.Minute)
		written := make([]bool, 2)
		for i, in := range ins {
			wg.Go(func() { _, written[i], errs[i] = in.cp.Checkpoint(t.Context()) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
		if written[0] == written[1] {
			t.Errorf("the installations wrote a checkpoint: %v, want exactly one", written)
		}
		list, err := sts[1].ListAuditCheckpoints(t.Context(), 0, 10)
		if err != nil || len(list) != 1 || list[0].Seq != 6 {
			t.Fatalf("stored checkpoints = %+v, %v; want one of seq 6", list, err)
		}
		// Either installation's published keys verify the other's
		// checkpoint.
		for i, in := range ins {
			if rep := verifyCheckpoints(t, sts[i], in.trusted(t)); !rep.Intact() || rep.Checkpoints != 1 {
				t.Errorf("installation %d verifies %+v, want intact with one checkpoint", i, rep)
			}
		}

		// An installation with another seal key cannot sign with the key.
		other, err := audit.NewKeys(sts[1], newSealKey(), origin, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Signer(t.Context()); !errors.Is(err, seal.ErrSealed) {
			t.Errorf("Signer with another seal key = %v, want seal.ErrSealed", err)
		}
	})
}

// TestKeyRotation: after a rotation the new key signs, and the old one
// stays published, so the checkpoints it signed still verify.
func TestKeyRotation(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		in := newInstallation(t, st, newSealKey(), newManualClock())
		appendAll(t, st)
		in.checkpoint(t, 6)
		before, err := in.keys.VerifierKeys(t.Context())
		if err != nil || len(before) != 1 {
			t.Fatalf("VerifierKeys = %q, %v; want one key", before, err)
		}
		if err := in.keys.Rotate(t.Context()); err != nil {
			t.Fatalf("Rotate: %v", err)
		}
		after, err := in.keys.VerifierKeys(t.Context())
		if err != nil || len(after) != 2 || after[1] != before[0] {
			t.Fatalf("VerifierKeys after Rotate = %q, %v; want a new key first, then %q", after, err, before[0])
		}
		appendAll(t, st)
		cp := in.checkpoint(t, 12)
		newest, err := note.NewVerifier(after[0])
		if err != nil {
			t.Fatal(err)
		}
		n, err := note.Open([]byte(cp.Note), note.VerifierList(newest))
		if err != nil || len(n.Sigs) != 1 {
			t.Errorf("the checkpoint after Rotate does not verify with the new key alone: %v", err)
		}
		if rep := verifyCheckpoints(t, st, in.trusted(t)); !rep.Intact() || rep.Checkpoints != 2 {
			t.Errorf("VerifyWithCheckpoints after Rotate = %+v, want intact with 2 checkpoints", rep)
		}
	})
}

func TestOriginOf(t *testing.T) {
	for in, want := range map[string]string{
		"https://usher.example.com":        "usher.example.com",
		"https://usher.example.com/":       "usher.example.com",
		"https://example.com/usher/":       "example.com/usher",
		"http://127.0.0.1:8080":            "127.0.0.1:8080",
		"https://example.com/a%20b":        "example.com/a%20b",
		"https://user@example.com:8443/x/": "example.com:8443/x",
	} {
		if got, err := audit.OriginOf(in); err != nil || got != want {
			t.Errorf("OriginOf(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "usher.example.com", "/path", "https://exa+mple.com"} {
		if got, err := audit.OriginOf(in); err == nil {
			t.Errorf("OriginOf(%q) = %q, want an error", in, got)
		}
	}
}

// TestCheckpointerStart: Start makes the key, so that it is published
// before any checkpoint, then checkpoints at once in its loop; a seal key
// that cannot open the key fails Start.
func TestCheckpointerStart(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		sealKey := newSealKey()
		in := newInstallation(t, st, sealKey, newManualClock())
		appendAll(t, st)
		if err := in.cp.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		defer in.cp.Stop()
		if list, err := in.keys.VerifierKeys(t.Context()); err != nil || len(list) != 1 {
			t.Errorf("VerifierKeys after Start = %q, %v; want the one key", list, err)
		}
		testenv.WaitFor(t, 30*time.Second, func() bool {
			cp, err := st.LatestAuditCheckpoint(t.Context())
			return err == nil && cp.Seq == 6
		})
		in.cp.Stop()
		in.cp.Stop() // idempotent

		other := newInstallation(t, st, newSealKey(), newManualClock())
		if err := other.cp.Start(t.Context()); !errors.Is(err, seal.ErrSealed) {
			other.cp.Stop()
			t.Errorf("Start with another seal key = %v, want seal.ErrSealed", err)
		}
	})
}
