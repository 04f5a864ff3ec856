package broker

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usherhq/usher/store"
)

// rotationOptions are short periods for rotation tests: a key signs for
// 2 h, is published 10 min ahead and 15 min 30 s after.
var rotationOptions = KeyringOptions{
	RotationPeriod: 2 * time.Hour,
	PublishAhead:   10 * time.Minute,
	CheckInterval:  time.Minute,
}

func TestKeyringFirstStart(t *testing.T) {
	t.Parallel()
	c := newClock()
	ks := &memKeyStore{}
	k := newTestKeyring(t, ks, c, nil)

	rows := ks.all("broker")
	if len(rows) != 1 {
		t.Fatalf("%d keys after the first start, want 1", len(rows))
	}
	row := rows[0]
	now := c.Now()
	if row.Generation != 1 || row.Algorithm != "RS256" || row.Purpose != "broker" ||
		!row.SignsFrom.Equal(now) || !row.CreatedAt.Equal(now) {
		t.Fatalf("first key = gen %d alg %s purpose %s signs from %s, created %s; want gen 1 RS256 broker now (%s)",
			row.Generation, row.Algorithm, row.Purpose, row.SignsFrom, row.CreatedAt, now)
	}
	if want := now.Add(30*24*time.Hour + 15*time.Minute + 30*time.Second); !row.PublishedUntil.Equal(want) {
		t.Fatalf("PublishedUntil = %s, want %s (rotation period + max token lifetime + skew)", row.PublishedUntil, want)
	}
	pub, err := x509.ParsePKIXPublicKey(row.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if bits := pub.(*rsa.PublicKey).N.BitLen(); bits != 2048 {
		t.Fatalf("key has %d bits, want 2048", bits)
	}
	wantKID, _ := thumbprint(pub.(*rsa.PublicKey))
	kid, priv, err := k.Signer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if kid != row.ID || kid != wantKID || !priv.PublicKey.Equal(pub) {
		t.Fatalf("Signer = %s, stored %s, thumbprint %s", kid, row.ID, wantKID)
	}

	// A second start (another process) reuses the key.
	k2 := newTestKeyring(t, ks, c, nil)
	if kid2, _, _ := k2.Signer(t.Context()); kid2 != kid || len(ks.all("broker")) != 1 {
		t.Fatalf("second start: signer %s, %d keys; want %s and 1 key", kid2, len(ks.all("broker")), kid)
	}
}

func TestKeyringKeyBits(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("generates a 3072-bit key")
	}
	c := newClock()
	k := newTestKeyring(t, &memKeyStore{}, c, &KeyringOptions{KeyBits: 3072})
	_, priv, err := k.Signer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if bits := priv.N.BitLen(); bits != 3072 {
		t.Fatalf("key has %d bits, want 3072", bits)
	}
}

// TestKeyringRotation follows one rotation: the successor is published
// before it signs, tokens of the old key stay valid until they expire, and
// then the old key leaves the key set.
func TestKeyringRotation(t *testing.T) {
	t.Parallel()
	c := newClock()
	ks := &memKeyStore{}
	k := newTestKeyring(t, ks, c, &rotationOptions)
	b, err := New(k, &Options{Issuer: testIssuer, TokenLifetime: MaxTokenLifetime, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(k, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	start := c.Now()
	old := ks.all("broker")[0]

	// Rotation is due PublishAhead + CheckInterval before the old key's
	// signing period ends: not a second earlier.
	due := start.Add(2*time.Hour - 10*time.Minute - time.Minute)
	c.Set(due.Add(-time.Second))
	if err := k.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(ks.all("broker")); n != 1 {
		t.Fatalf("%d keys before rotation is due, want 1", n)
	}
	c.Set(due)
	if err := k.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	rows := ks.all("broker")
	if len(rows) != 2 {
		t.Fatalf("%d keys once rotation is due, want 2", len(rows))
	}
	next := rows[1]
	if next.Generation != 2 || !next.SignsFrom.Equal(due.Add(10*time.Minute)) {
		t.Fatalf("successor: generation %d signs from %s; want 2 from %s", next.Generation, next.SignsFrom, due.Add(10*time.Minute))
	}
	// A second Rotate while the successor waits does nothing.
	if err := k.Rotate(ctx); err != nil || len(ks.all("broker")) != 2 {
		t.Fatalf("Rotate with a successor pending: %v, %d keys", err, len(ks.all("broker")))
	}

	// Published at once, but the old key still signs.
	if kids := publishedKIDs(t, k); kids != old.ID+" "+next.ID {
		t.Fatalf("published %q, want both keys", kids)
	}
	c.Set(next.SignsFrom.Add(-time.Second))
	lastOld, err := b.Mint(ctx, Grant{Subject: "alice", Audience: testAudience})
	if err != nil {
		t.Fatal(err)
	}
	if kid := tokenKID(t, lastOld.Raw); kid != old.ID {
		t.Fatalf("before the successor's start, signed by %s, want the old key %s", kid, old.ID)
	}

	// From SignsFrom on, the successor signs.
	c.Set(next.SignsFrom)
	first, err := b.Mint(ctx, Grant{Subject: "alice", Audience: testAudience})
	if err != nil {
		t.Fatal(err)
	}
	if kid := tokenKID(t, first.Raw); kid != next.ID {
		t.Fatalf("from the successor's start, signed by %s, want %s", kid, next.ID)
	}
	if _, err := v.Verify(ctx, first.Raw); err != nil {
		t.Fatalf("the successor's first token: %v", err)
	}

	// The old key's last token stays valid to its expiry and its leeway.
	c.Set(lastOld.Expiry.Add(MaxLeeway - time.Second))
	if _, err := v.Verify(ctx, lastOld.Raw); err != nil {
		t.Fatalf("the old key's last token, within its leeway: %v", err)
	}
	if kids := publishedKIDs(t, k); kids != old.ID+" "+next.ID {
		t.Fatalf("published %q while an old token is valid, want both keys", kids)
	}

	// Then the old key leaves the key set, and its kid is unknown, even to
	// a keyring that loaded the set a second earlier.
	c.Set(old.PublishedUntil.Add(-time.Second))
	if _, err := k.Key(ctx, old.ID); err != nil {
		t.Fatalf("Key(old) a second before it leaves the key set: %v", err)
	}
	c.Set(old.PublishedUntil)
	if kids := publishedKIDs(t, k); kids != next.ID {
		t.Fatalf("published %q after the old key's tokens expired, want only %s", kids, next.ID)
	}
	if _, err := k.Key(ctx, old.ID); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Key(old) = %v, want ErrUnknownKey", err)
	}
	if !old.PublishedUntil.After(lastOld.Expiry.Add(MaxLeeway)) && !old.PublishedUntil.Equal(lastOld.Expiry.Add(MaxLeeway)) {
		t.Fatalf("old key unpublished at %s, before its last token's expiry + leeway %s", old.PublishedUntil, lastOld.Expiry.Add(MaxLeeway))
	}
	current, err := b.Mint(ctx, Grant{Subject: "alice", Audience: testAudience})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, current.Raw); err != nil {
		t.Fatalf("the successor's token: %v", err)
	}
}

// TestKeyringLate: when nothing rotated in time, the keyring never leaves a
// gap without a signer, and never signs with a key that would leave the key
// set before its tokens expire.
func TestKeyringLate(t *testing.T) {
	t.Parallel()
	t.Run("within the publish-ahead window", func(t *testing.T) {
		c := newClock()
		ks := &memKeyStore{}
		k := newTestKeyring(t, ks, c, &rotationOptions)
		old := ks.all("broker")[0]
		end := old.SignsFrom.Add(2 * time.Hour)
		c.Set(end.Add(-time.Minute)) // should have rotated 10 min ago
		if err := k.Rotate(t.Context()); err != nil {
			t.Fatal(err)
		}
		next := ks.all("broker")[1]
		if !next.SignsFrom.Equal(end) {
			t.Fatalf("successor signs from %s, want the old key's end %s", next.SignsFrom, end)
		}
	})
	t.Run("after the old key stopped signing", func(t *testing.T) {
		c := newClock()
		ks := &memKeyStore{}
		k := newTestKeyring(t, ks, c, &rotationOptions)
		old := ks.all("broker")[0]
		c.Set(old.SignsFrom.Add(2 * time.Hour)) // the old key may no longer sign
		kid, _, err := k.Signer(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if kid == old.ID || len(ks.all("broker")) != 2 {
			t.Fatalf("Signer = %s with %d keys; want a new key, not %s", kid, len(ks.all("broker")), old.ID)
		}
	})
	t.Run("after every key expired", func(t *testing.T) {
		c := newClock()
		ks := &memKeyStore{}
		k := newTestKeyring(t, ks, c, &rotationOptions)
		old := ks.all("broker")[0]
		c.Set(old.PublishedUntil.Add(24 * time.Hour))
		kid, _, err := k.Signer(t.Context())
		if err != nil {
			t.Fatalf("Signer after every key expired: %v", err)
		}
		rows := ks.all("broker")
		if len(rows) != 2 || rows[1].Generation != 2 || rows[1].ID != kid {
			t.Fatalf("after every key expired: %d keys, signer %s; want generation 2", len(rows), kid)
		}
	})
}

// TestKeyringReplicasRace: replicas sharing a store that start or rotate at
// once insert one key, and all use it.
func TestKeyringReplicasRace(t *testing.T) {
	t.Parallel()
	c := newClock()
	ks := &memKeyStore{}
	const replicas = 4
	rings := make([]*Keyring, replicas)
	for i := range rings {
		o := rotationOptions
		o.Now, o.Logger = c.Now, quietLogger
		k, err := NewKeyring(ks, "broker", testSealKey, &o)
		if err != nil {
			t.Fatal(err)
		}
		rings[i] = k
		t.Cleanup(k.Stop)
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
	signers := func() string {
		var kids []string
		for _, k := range rings {
			kid, _, err := k.Signer(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			kids = append(kids, kid)
		}
		return strings.Join(kids, " ")
	}

	each(func(k *Keyring) error { return k.Start(t.Context()) })
	rows := ks.all("broker")
	if len(rows) != 1 {
		t.Fatalf("%d keys after %d replicas started at once, want 1", len(rows), replicas)
	}
	if got, want := signers(), strings.TrimSpace(strings.Repeat(rows[0].ID+" ", replicas)); got != want {
		t.Fatalf("signers %q, want all %s", got, rows[0].ID)
	}

	c.Set(rows[0].SignsFrom.Add(2*time.Hour - 10*time.Minute))
	each(func(k *Keyring) error { return k.Rotate(t.Context()) })
	rows = ks.all("broker")
	if len(rows) != 2 {
		t.Fatalf("%d keys after %d replicas rotated at once, want 2", len(rows), replicas)
	}
	for _, k := range rings {
		if kids := publishedKIDs(t, k); kids != rows[0].ID+" "+rows[1].ID {
			t.Fatalf("a replica publishes %q, want both keys", kids)
		}
	}
	c.Set(rows[1].SignsFrom)
	if got, want := signers(), strings.TrimSpace(strings.Repeat(rows[1].ID+" ", replicas)); got != want {
		t.Fatalf("signers %q, want all %s", got, rows[1].ID)
	}
}

// afterFirstRead runs a function once, right after the first read through
// it returns from the real store: another replica acting between this
// replica's read and its decision.
type afterFirstRead struct {
	KeyStore
	once sync.Once
	then func()
}

func (a *afterFirstRead) SigningKeys(ctx context.Context, purpose string, now time.Time) ([]store.SigningKey, error) {
	rows, err := a.KeyStore.SigningKeys(ctx, purpose, now)
	a.once.Do(a.then)
	return rows, err
}

// TestKeyringRotateAfterStaleRead: a replica whose first read missed the key
// another replica just inserted does not insert a second one.
func TestKeyringRotateAfterStaleRead(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"first start", "rotation"} {
		t.Run(name, func(t *testing.T) {
			c := newClock()
			ks := &memKeyStore{}
			o := rotationOptions
			o.Now, o.Logger = c.Now, quietLogger
			other, err := NewKeyring(ks, "broker", testSealKey, &o)
			if err != nil {
				t.Fatal(err)
			}
			want := 1
			if name == "rotation" {
				if err := other.Rotate(t.Context()); err != nil {
					t.Fatal(err)
				}
				c.Advance(2*time.Hour - 10*time.Minute)
				want = 2
			}
			slow, err := NewKeyring(&afterFirstRead{KeyStore: ks, then: func() {
				if err := other.Rotate(t.Context()); err != nil {
					t.Error(err)
				}
			}}, "broker", testSealKey, &o)
			if err != nil {
				t.Fatal(err)
			}
			if err := slow.Rotate(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n := len(ks.all("broker")); n != want {
				t.Fatalf("%d keys, want %d: the slow replica inserted a key of its own", n, want)
			}
			c.Advance(10 * time.Minute) // past any successor's start
			a, _, _ := other.Signer(t.Context())
			b, _, _ := slow.Signer(t.Context())
			if a != b {
				t.Fatalf("replicas sign with %s and %s", a, b)
			}
		})
	}
}

// TestKeyringReplicaLearnsNewKey: a replica that has not reloaded yet
// verifies a token signed with a key another replica created, by reloading
// on the unknown kid.
func TestKeyringReplicaLearnsNewKey(t *testing.T) {
	t.Parallel()
	c := newClock()
	ks := &memKeyStore{}
	a := newTestKeyring(t, ks, c, &rotationOptions)
	b := newTestKeyring(t, ks, c, &rotationOptions)

	c.Advance(2*time.Hour - 10*time.Minute)
	if err := a.Rotate(t.Context()); err != nil {
		t.Fatal(err)
	}
	next := ks.all("broker")[1]
	c.Set(next.SignsFrom)
	kid, _, err := a.Signer(t.Context())
	if err != nil || kid != next.ID {
		t.Fatalf("a signs with %s (%v), want %s", kid, err, next.ID)
	}
	if _, err := b.Key(t.Context(), kid); err != nil {
		t.Fatalf("b.Key(new kid): %v", err)
	}
}

// TestKeyringUnknownKidFlood: however many unknown kids arrive, the store is
// read at most once per MinRefreshInterval.
func TestKeyringUnknownKidFlood(t *testing.T) {
	t.Parallel()
	c := newClock()
	counting := &countingKeyStore{KeyStore: &memKeyStore{}}
	k := newTestKeyring(t, counting, c, nil)
	kid, _, err := k.Signer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(10 * time.Second) // the start's own reads are an interval ago

	flood := func() {
		var wg sync.WaitGroup
		for i := range 500 {
			wg.Go(func() {
				if _, err := k.Key(t.Context(), fmt.Sprintf("random-%d-%x", i, randomBytes(8))); !errors.Is(err, ErrUnknownKey) {
					t.Errorf("Key(random) = %v, want ErrUnknownKey", err)
				}
			})
		}
		wg.Wait()
	}
	counting.reads.Store(0)
	flood()
	if n := counting.reads.Load(); n != 1 {
		t.Fatalf("%d store reads for a flood of unknown kids, want 1", n)
	}
	c.Advance(10*time.Second - time.Nanosecond)
	flood()
	if n := counting.reads.Load(); n != 1 {
		t.Fatalf("%d store reads within the interval, want still 1", n)
	}
	c.Advance(time.Nanosecond)
	flood()
	if n := counting.reads.Load(); n != 2 {
		t.Fatalf("%d store reads after the interval, want 2", n)
	}
	// A known kid costs no read.
	if _, err := k.Key(t.Context(), kid); err != nil {
		t.Fatal(err)
	}
	if n := counting.reads.Load(); n != 2 {
		t.Fatalf("%d store reads after a known kid, want 2", n)
	}
}

// TestKeyringSealing: private keys are encrypted at rest, bound to their
// row, and a wrong seal key fails loudly.
func TestKeyringSealing(t *testing.T) {
	t.Parallel()
	c := newClock()
	ks := &memKeyStore{}
	k := newTestKeyring(t, ks, c, &rotationOptions)
	_, priv, err := k.Signer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	row := ks.all("broker")[0]

	pkcs8, _ := x509.MarshalPKCS8PrivateKey(priv)
	for name, secret := range map[string][]byte{
		"PKCS#8 DER": pkcs8,
		"PKCS#1 DER": x509.MarshalPKCS1PrivateKey(priv),
		"D":          priv.D.Bytes(),
		"P":          priv.Primes[0].Bytes(),
		"Q":          priv.Primes[1].Bytes(),
	} {
		if bytes.Contains(row.PrivateKey, secret[:32]) {
			t.Errorf("the stored private key contains the %s in the clear", name)
		}
	}

	open := func(ks KeyStore, purpose string, seal []byte) error {
		k, err := NewKeyring(ks, purpose, seal, &KeyringOptions{Now: c.Now, Logger: quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		_, err = k.PublicKeys(t.Context())
		return err
	}
	if err := open(ks, "broker", testSealKey); err != nil {
		t.Fatalf("the right seal key: %v", err)
	}
	wrong := bytes.Repeat([]byte{8}, SealKeySize)
	if err := open(ks, "broker", wrong); err == nil || !strings.Contains(err.Error(), "seal key") {
		t.Fatalf("a wrong seal key: %v; want an error that names the seal key", err)
	}
	kr, _ := NewKeyring(ks, "broker", wrong, &KeyringOptions{Now: c.Now, Logger: quietLogger})
	if err := kr.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "seal key") {
		t.Fatalf("Start with a wrong seal key: %v", err)
	}

	// Rows altered in the database do not load.
	c.Advance(2*time.Hour - 10*time.Minute)
	if err := k.Rotate(t.Context()); err != nil {
		t.Fatal(err)
	}
	rows := ks.all("broker")
	tests := []struct {
		name   string
		change func(s *memKeyStore)
	}{
		{"sealed key moved to another row", func(s *memKeyStore) {
			s.update(rows[1].ID, func(r *store.SigningKey) { r.PrivateKey = bytes.Clone(rows[0].PrivateKey) })
		}},
		{"row moved to another purpose", func(s *memKeyStore) {
			s.update(rows[0].ID, func(r *store.SigningKey) { r.Purpose = "devoidc" })
		}},
		{"sealed key truncated", func(s *memKeyStore) {
			s.update(rows[0].ID, func(r *store.SigningKey) { r.PrivateKey = r.PrivateKey[:20] })
		}},
		{"sealed key bit flipped", func(s *memKeyStore) {
			s.update(rows[0].ID, func(r *store.SigningKey) { r.PrivateKey[40] ^= 1 })
		}},
		{"public key replaced", func(s *memKeyStore) {
			s.update(rows[0].ID, func(r *store.SigningKey) { r.PublicKey = bytes.Clone(rows[1].PublicKey) })
		}},
		{"algorithm changed", func(s *memKeyStore) {
			s.update(rows[0].ID, func(r *store.SigningKey) { r.Algorithm = "HS256" })
		}},
		// Rows only a holder of the seal key could write: each breaks one
		// invariant of the key material.
		{"kid not the thumbprint of the public key", func(s *memKeyStore) {
			s.update(rows[0].ID, func(r *store.SigningKey) {
				*r = sealedRow(t, k, "not-the-thumbprint", "not-the-thumbprint", attackerKey(), attackerKey())
			})
		}},
		{"sealed for another kid", func(s *memKeyStore) {
			kid, _ := thumbprint(&attackerKey().PublicKey)
			s.update(rows[0].ID, func(r *store.SigningKey) { *r = sealedRow(t, k, kid, "another-kid", attackerKey(), attackerKey()) })
		}},
		{"private key not the public key's pair", func(s *memKeyStore) {
			s.update(rows[0].ID, func(r *store.SigningKey) { *r = sealedRow(t, k, r.ID, r.ID, priv, attackerKey()) })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &memKeyStore{rows: []store.SigningKey{cloneKey(rows[0]), cloneKey(rows[1])}}
			tt.change(s)
			purpose := "broker"
			if tt.name == "row moved to another purpose" {
				purpose = "devoidc"
			}
			if err := open(s, purpose, testSealKey); err == nil {
				t.Fatal("the altered key set loaded")
			}
		})
	}
	// The constructed row itself is sound when nothing is broken.
	attackerKID, _ := thumbprint(&attackerKey().PublicKey)
	s := &memKeyStore{rows: []store.SigningKey{sealedRow(t, k, attackerKID, attackerKID, attackerKey(), attackerKey())}}
	kr, _ = NewKeyring(s, "broker", testSealKey, &KeyringOptions{Now: c.Now, Logger: quietLogger})
	if _, err := kr.Key(t.Context(), attackerKID); err != nil {
		t.Fatalf("a sound constructed row: %v", err)
	}
}

func TestKeyringOptions(t *testing.T) {
	t.Parallel()
	ks := &memKeyStore{}
	tests := []struct {
		name    string
		ks      KeyStore
		purpose string
		seal    []byte
		opts    *KeyringOptions
		want    []string
	}{
		{"everything wrong", nil, "Broker Keys", make([]byte, 16),
			&KeyringOptions{KeyBits: 1024, PublishAhead: time.Minute, RotationPeriod: 2 * time.Minute},
			[]string{"key store", "purpose", "seal key", "KeyBits", "PublishAhead", "RotationPeriod"}},
		{"purpose with NUL", ks, "a\x00b", testSealKey, nil, []string{"purpose"}},
		{"publish-ahead within a check", ks, "broker", testSealKey,
			&KeyringOptions{PublishAhead: time.Minute, CheckInterval: time.Minute}, []string{"PublishAhead (1m0s) must exceed CheckInterval"}},
		{"empty purpose", ks, "", testSealKey, nil, []string{"purpose"}},
		{"rotation period too short for the defaults", ks, "broker", testSealKey,
			&KeyringOptions{RotationPeriod: 11 * time.Minute}, []string{"RotationPeriod"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewKeyring(tt.ks, tt.purpose, tt.seal, tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := NewKeyring(ks, "devoidc", testSealKey, nil); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// TestKeyringStartStop runs the real loop on a fake clock: it rotates on its
// own, and Stop is idempotent.
func TestKeyringStartStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ks := &memKeyStore{}
		o := rotationOptions
		o.Logger = quietLogger
		k, err := NewKeyring(ks, "broker", testSealKey, &o)
		if err != nil {
			t.Fatal(err)
		}
		k.Stop() // before Start: nothing to do
		ctx, cancel := context.WithCancel(t.Context())
		if err := k.Start(ctx); err != nil {
			t.Fatal(err)
		}
		cancel() // the start's context ends; the loop does not
		if err := k.Start(t.Context()); err == nil {
			t.Fatal("a second Start succeeded")
		}
		time.Sleep(5*time.Hour + time.Minute)
		synctest.Wait()
		if n := len(ks.all("broker")); n != 3 {
			t.Fatalf("%d keys after 5 h of 2 h rotations, want 3", n)
		}
		k.Stop()
		k.Stop()
		time.Sleep(5 * time.Hour)
		synctest.Wait()
		if n := len(ks.all("broker")); n != 3 {
			t.Fatalf("%d keys after Stop and 5 more hours, want still 3", n)
		}
	})
}

// TestKeyringStoreDown: a keyring keeps signing and verifying with the keys
// it loaded while the store is unreachable, until they expire.
func TestKeyringStoreDown(t *testing.T) {
	t.Parallel()
	c := newClock()
	ks := &memKeyStore{}
	k := newTestKeyring(t, ks, c, &rotationOptions)
	kid, _, err := k.Signer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ks.unavailable.Store(true)
	c.Advance(5 * time.Minute) // past CheckInterval: the keyring tries to reload
	if got, _, err := k.Signer(t.Context()); err != nil || got != kid {
		t.Fatalf("Signer with the store down = %s, %v; want %s", got, err, kid)
	}
	if _, err := k.Key(t.Context(), kid); err != nil {
		t.Fatalf("Key with the store down: %v", err)
	}
	if err := k.Rotate(t.Context()); !errors.Is(err, errUnavailable) {
		t.Fatalf("Rotate with the store down = %v", err)
	}
}

func TestJWKSHandler(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := newHTTPServer(t, f.keys.JWKSHandler())

	resp, body := httpGet(t, srv.URL)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=300" {
		t.Fatalf("Cache-Control %q, want public, max-age=300", cc)
	}
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	kid, key := f.signer(t)
	if len(doc.Keys) != 1 {
		t.Fatalf("%d keys, want 1", len(doc.Keys))
	}
	jwk := doc.Keys[0]
	for member := range jwk {
		switch member {
		case "kty", "kid", "alg", "use", "n", "e":
		default:
			t.Errorf("key set member %q: only kty, kid, alg, use, n and e may be published", member)
		}
	}
	if jwk["kty"] != "RSA" || jwk["kid"] != kid || jwk["alg"] != "RS256" || jwk["use"] != "sig" ||
		jwk["n"] != base64.RawURLEncoding.EncodeToString(key.N.Bytes()) || jwk["e"] != "AQAB" {
		t.Fatalf("key = %v", jwk)
	}

	for _, method := range []string{"POST", "PUT", "DELETE"} {
		resp := httpDo(t, method, srv.URL)
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: status %d, Allow %q", method, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}

	// A keyring that cannot load answers 503 with nothing internal.
	down := &memKeyStore{}
	down.unavailable.Store(true)
	k, _ := NewKeyring(down, "broker", testSealKey, &KeyringOptions{Logger: quietLogger})
	resp, body = httpGet(t, newHTTPServer(t, k.JWKSHandler()).URL)
	if resp.StatusCode != 503 || strings.Contains(string(body), errUnavailable.Error()) || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("store down: status %d, body %q, Cache-Control %q", resp.StatusCode, body, resp.Header.Get("Cache-Control"))
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// publishedKIDs lists the kids of k's key set, oldest first.
func publishedKIDs(t *testing.T, k *Keyring) string {
	t.Helper()
	set, err := k.PublicKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, key := range set.Keys {
		if key.Algorithm != "RS256" || key.Use != "sig" || !key.IsPublic() {
			t.Fatalf("published key %s: alg %q use %q public %v", key.KeyID, key.Algorithm, key.Use, key.IsPublic())
		}
		kids = append(kids, key.KeyID)
	}
	return strings.Join(kids, " ")
}

// sealedRow builds a stored key with the given kid, the public half of pub
// and the private key priv sealed by k for sealKID, published now.
func sealedRow(t *testing.T, k *Keyring, kid, sealKID string, pub, priv *rsa.PrivateKey) store.SigningKey {
	t.Helper()
	pubDER, err := x509.MarshalPKIXPublicKey(&pub.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	now := k.opts.Now()
	return store.SigningKey{
		ID: kid, Purpose: "broker", Generation: 1, Algorithm: "RS256", PublicKey: pubDER,
		PrivateKey: k.sealer.seal(privDER, "broker", sealKID),
		CreatedAt:  now, SignsFrom: now, PublishedUntil: now.Add(time.Hour),
	}
}
