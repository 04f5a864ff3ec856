package audit_test

import (
	"database/sql"
	"testing"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// TestKeysReseal replaces the seal key of the audit keys as an operator
// does: with the old key as a previous one the same key signs the next
// checkpoint; Reseal seals every key with the new key, after which the new
// key alone signs with it, every checkpoint still verifies, and a second
// Reseal has nothing to do.
func TestKeysReseal(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		clk := newManualClock()
		oldKey, newKey := newSealKey(), newSealKey()
		first := newInstallation(t, st, oldKey, clk)
		appendAll(t, st)
		first.checkpoint(t, 6)
		if err := first.keys.Rotate(t.Context()); err != nil {
			t.Fatal(err)
		}
		published, err := first.keys.VerifierKeys(t.Context())
		if err != nil || len(published) != 2 {
			t.Fatalf("VerifierKeys = %q, %v; want two keys", published, err)
		}
		keys := func(seal []byte, previous ...[]byte) *audit.Keys {
			t.Helper()
			k, err := audit.NewKeys(st, seal, origin, &audit.KeysOptions{Now: clk.Now, PreviousSealKeys: previous})
			if err != nil {
				t.Fatal(err)
			}
			return k
		}
		if _, err := keys(newKey).Signer(t.Context()); err == nil {
			t.Fatal("the new seal key alone opened a key the old one sealed")
		}
		both := keys(newKey, oldKey)
		if _, err := both.Signer(t.Context()); err != nil {
			t.Fatalf("with the old key as a previous one: %v", err)
		}
		if n, err := both.Reseal(t.Context(), st); err != nil || n != 2 {
			t.Fatalf("Reseal = %d, %v; want both keys resealed", n, err)
		}
		if n, err := both.Reseal(t.Context(), st); err != nil || n != 0 {
			t.Errorf("a second Reseal = %d, %v; want nothing to do", n, err)
		}
		if _, err := keys(oldKey).Signer(t.Context()); err == nil {
			t.Error("the old seal key alone still opens the keys after the reseal")
		}
		after := newInstallation(t, st, newKey, clk)
		appendAll(t, st)
		after.checkpoint(t, 12)
		if again, err := after.keys.VerifierKeys(t.Context()); err != nil || len(again) != 2 || again[0] != published[0] || again[1] != published[1] {
			t.Errorf("the keys after the reseal = %q, %v; want the same %q", again, err, published)
		}
		if rep := verifyCheckpoints(t, st, after.trusted(t)); !rep.Intact() || rep.Checkpoints != 2 {
			t.Errorf("VerifyWithCheckpoints after the reseal = %+v, want intact with 2 checkpoints", rep)
		}
		if _, err := audit.NewKeys(st, newKey, origin, &audit.KeysOptions{PreviousSealKeys: [][]byte{[]byte("short")}}); err == nil {
			t.Error("NewKeys took a previous seal key of 5 bytes")
		}
	})
}
