package broker

import (
	"bytes"
	"crypto/x509"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// engines opens two handles on one new, migrated database of each engine,
// as two replicas would share it. PostgreSQL runs when TEST_DATABASE_URL is
// set.
var engines = []struct {
	name string
	open func(t *testing.T) (a, b store.Store)
}{
	{"sqlite", func(t *testing.T) (store.Store, store.Store) {
		path := filepath.Join(t.TempDir(), "usher.db")
		return openMigrated(t, path), openStore(t, path)
	}},
	{"postgres", func(t *testing.T) (store.Store, store.Store) {
		url := storetest.PostgresURL(t)
		return openMigrated(t, url), openStore(t, url)
	}},
}

func openStore(t *testing.T, dsn string) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openMigrated(t *testing.T, dsn string) store.Store {
	t.Helper()
	s := openStore(t, dsn)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKeyringOnStores runs a keyring's life on the real databases: replicas
// racing to create and rotate, sealing at rest, the old key leaving the key
// set, generations continuing after every key expired, and bounded reloads.
func TestKeyringOnStores(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			a, b := e.open(t)
			c := newClock()
			var rings []*Keyring
			for _, s := range []store.Store{a, b, a, b} {
				o := rotationOptions
				o.Now, o.Logger = c.Now, quietLogger
				k, err := NewKeyring(s, "broker", testSealKey, &o)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(k.Stop)
				rings = append(rings, k)
			}
			all := func() []store.SigningKey {
				rows, err := a.SigningKeys(t.Context(), "broker", time.Unix(0, 0))
				if err != nil {
					t.Fatal(err)
				}
				return rows
			}
			each := func(f func(k *Keyring) error) {
				var wg sync.WaitGroup
				for _, k := range rings {
					wg.Go(func() {
						if err := f(k); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
			}

			// Four replicas start at once: one key.
			each(func(k *Keyring) error { return k.Start(t.Context()) })
			rows := all()
			if len(rows) != 1 || rows[0].Generation != 1 {
				t.Fatalf("%d keys after 4 replicas started, want 1", len(rows))
			}
			first := rows[0]
			kid, priv, err := rings[3].Signer(t.Context())
			if err != nil || kid != first.ID {
				t.Fatalf("replica signs with %s (%v), want %s", kid, err, first.ID)
			}

			// Sealed at rest; a wrong seal key fails loudly.
			der, _ := x509.MarshalPKCS8PrivateKey(priv)
			if bytes.Contains(first.PrivateKey, der[:64]) || bytes.Contains(first.PrivateKey, priv.D.Bytes()[:32]) {
				t.Fatal("the database holds the private key in the clear")
			}
			wrong, _ := NewKeyring(b, "broker", bytes.Repeat([]byte{9}, SealKeySize), &KeyringOptions{Now: c.Now, Logger: quietLogger})
			if _, err := wrong.Key(t.Context(), first.ID); err == nil || !strings.Contains(err.Error(), "seal key") {
				t.Fatalf("a wrong seal key: %v", err)
			}

			// Rotation: one successor, published ahead, the old key gone
			// once its tokens expired.
			c.Set(first.SignsFrom.Add(2*time.Hour - 11*time.Minute))
			each(func(k *Keyring) error { return k.Rotate(t.Context()) })
			rows = all()
			if len(rows) != 2 || rows[1].Generation != 2 {
				t.Fatalf("%d keys after 4 replicas rotated, want 2", len(rows))
			}
			if got := publishedKIDs(t, rings[1]); got != first.ID+" "+rows[1].ID {
				t.Fatalf("published %q, want both", got)
			}
			c.Set(first.PublishedUntil)
			if got := publishedKIDs(t, rings[2]); got != rows[1].ID {
				t.Fatalf("published %q after the old key expired, want only %s", got, rows[1].ID)
			}

			// Every key expired: the next key is generation 3.
			c.Set(rows[1].PublishedUntil.Add(time.Hour))
			if _, _, err := rings[0].Signer(t.Context()); err != nil {
				t.Fatalf("Signer after every key expired: %v", err)
			}
			if rows = all(); len(rows) != 3 || rows[2].Generation != 3 {
				t.Fatalf("after every key expired: %d keys, last generation %d; want 3", len(rows), rows[len(rows)-1].Generation)
			}

			// Unknown kids: one read per interval.
			counting := &countingKeyStore{KeyStore: b}
			o := rotationOptions
			o.Now, o.Logger = c.Now, quietLogger
			k, err := NewKeyring(counting, "broker", testSealKey, &o)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 100 {
				if _, err := k.Key(t.Context(), "unknown-"+string(rune('a'+i%26))); !errors.Is(err, ErrUnknownKey) {
					t.Fatalf("Key(unknown) = %v", err)
				}
			}
			if n := counting.reads.Load(); n != 1 {
				t.Fatalf("%d reads for 100 unknown kids, want 1", n)
			}
		})
	}
}
