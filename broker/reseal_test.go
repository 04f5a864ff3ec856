package broker

import (
	"bytes"
	"errors"
	"testing"
)

// TestKeyringReseal replaces the seal key as an operator does, on the
// real databases: keys sealed with the old key do not open with the new
// one alone; with the old one as a previous seal key they sign as before;
// Reseal seals each with the new key, after which the new key alone opens
// them, the same keys, and a second Reseal has nothing to do.
func TestKeyringReseal(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			st, _ := e.open(t)
			c := newClock()
			oldKey, newKey := testSealKey, bytes.Repeat([]byte{8}, SealKeySize)
			keyring := func(seal []byte, previous ...[]byte) *Keyring {
				t.Helper()
				k, err := NewKeyring(st, "broker", seal, &KeyringOptions{Now: c.Now, Logger: quietLogger, PreviousSealKeys: previous})
				if err != nil {
					t.Fatal(err)
				}
				return k
			}
			first := keyring(oldKey)
			if err := first.Rotate(t.Context()); err != nil {
				t.Fatal(err)
			}
			kid, _, err := first.Signer(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			rows, err := st.SigningKeys(t.Context(), "broker", c.Now())
			if err != nil || len(rows) == 0 {
				t.Fatalf("the stored keys: %d, %v", len(rows), err)
			}

			if _, _, err := keyring(newKey).Signer(t.Context()); !errors.Is(err, ErrUnseal) {
				t.Fatalf("the new seal key alone, before the reseal: %v, want ErrUnseal", err)
			}
			both := keyring(newKey, oldKey)
			if got, _, err := both.Signer(t.Context()); err != nil || got != kid {
				t.Fatalf("with the old key as a previous one: signer %s, %v; want %s", got, err, kid)
			}
			if n, err := both.Reseal(t.Context(), st); err != nil || n != len(rows) {
				t.Fatalf("Reseal = %d, %v; want the %d keys resealed", n, err, len(rows))
			}
			if n, err := both.Reseal(t.Context(), st); err != nil || n != 0 {
				t.Errorf("a second Reseal = %d, %v; want nothing to do", n, err)
			}
			if got, _, err := keyring(newKey).Signer(t.Context()); err != nil || got != kid {
				t.Errorf("the new seal key alone, after the reseal: signer %s, %v; want %s", got, err, kid)
			}
			if _, _, err := keyring(oldKey).Signer(t.Context()); !errors.Is(err, ErrUnseal) {
				t.Errorf("the old seal key alone, after the reseal: %v, want ErrUnseal", err)
			}
			// A key that neither seal key opens stops the reseal.
			if _, err := keyring(bytes.Repeat([]byte{9}, SealKeySize), oldKey).Reseal(t.Context(), st); !errors.Is(err, ErrUnseal) {
				t.Errorf("Reseal with neither the seal key nor a previous one = %v, want ErrUnseal", err)
			}
			if _, err := NewKeyring(st, "broker", newKey, &KeyringOptions{PreviousSealKeys: [][]byte{[]byte("short")}}); err == nil {
				t.Error("NewKeyring took a previous seal key of 5 bytes")
			}
		})
	}
}
