package audit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/usherhq/usher/internal/seal"
	"github.com/usherhq/usher/store"
)

// KeyPurpose is the purpose of the audit signing keys among the
// installation's signing keys (store.SigningKey.Purpose).
const KeyPurpose = "audit"

// KeyAlgorithm is the algorithm of every audit signing key: Ed25519, as
// the signed-note format writes it.
const KeyAlgorithm = "Ed25519"

// keySalt separates the audit keys' sealing key from every other key the
// seal key derives.
const keySalt = "usher audit signing-key seal v1"

// keysPublishedUntil is when an audit key leaves the published set: never.
// A checkpoint is checked for as long as the log is kept, so every key that
// signed one stays published, rotated or not.
var keysPublishedUntil = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// KeyStore is the part of the database Keys uses; store.Store is one.
type KeyStore interface {
	// InsertSigningKey stores a new key; a duplicate ID or (Purpose,
	// Generation) fails with store.ErrConflict.
	InsertSigningKey(ctx context.Context, k store.SigningKey) error
	// SigningKeys returns the purpose's keys published after now, oldest
	// generation first.
	SigningKeys(ctx context.Context, purpose string, now time.Time) ([]store.SigningKey, error)
}

// KeysOptions configures NewKeys. A nil *KeysOptions means every default.
type KeysOptions struct {
	// Now is the clock that stamps new keys. Default: time.Now.
	Now func() time.Time
	// PreviousSealKeys are seal keys the private halves may still be
	// sealed with, from before the seal key was replaced: they open keys,
	// never seal them, until Reseal has sealed every key with the seal
	// key.
	PreviousSealKeys [][]byte
}

// Keys are the installation's audit signing keys: Ed25519 keys in the
// signed-note format of golang.org/x/mod/sumdb/note, stored in the
// database with their private halves sealed, so that every replica
// sharing the database and the seal key signs with the same key. The
// newest generation signs; every older one stays published, so that the
// checkpoints it signed still verify.
type Keys struct {
	ks       KeyStore
	sealKey  []byte
	previous [][]byte
	name     string
	now      func() time.Time
}

// NewKeys returns the audit keys stored in ks. sealKey (32 bytes, the
// broker's seal key) seals their private halves at rest. name names a new
// key (the origin of its checkpoints, such as the installation's host); a
// key keeps the name it was made with. NewKeys does no I/O: the first key
// is made by the first Signer or Rotate.
func NewKeys(ks KeyStore, sealKey []byte, name string, opts *KeysOptions) (*Keys, error) {
	var errs []error
	if ks == nil {
		errs = append(errs, errors.New("a key store is required"))
	}
	if len(sealKey) != 32 {
		errs = append(errs, fmt.Errorf("the seal key is %d bytes, want 32", len(sealKey)))
	}
	if opts != nil {
		for i, p := range opts.PreviousSealKeys {
			if len(p) != 32 {
				errs = append(errs, fmt.Errorf("previous seal key %d is %d bytes, want 32", i+1, len(p)))
			}
		}
	}
	if err := checkOrigin(name); err != nil {
		errs = append(errs, fmt.Errorf("key name: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("audit: keys: %w", err)
	}
	k := &Keys{ks: ks, sealKey: sealKey, name: name, now: time.Now}
	if opts != nil && opts.Now != nil {
		k.now = opts.Now
	}
	if opts != nil {
		k.previous = opts.PreviousSealKeys
	}
	return k, nil
}

// checkOrigin refuses a name a note key or a checkpoint's first line
// cannot carry: empty, with a space or a '+'.
func checkOrigin(name string) error {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == '+' || r == 0x7f }) {
		return fmt.Errorf("%q must be non-empty, without spaces, control characters or '+'", name)
	}
	return nil
}

// Signer returns the newest key's signer, making the first key when there
// is none. Of replicas that make the first key at once, one stores its
// key and all sign with it.
func (k *Keys) Signer(ctx context.Context) (note.Signer, error) {
	rows, err := k.rows(ctx)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		// The first generation, not the one after whatever another
		// replica stored meanwhile: of replicas that make it at once, one
		// stores it (a second generation would be a second key).
		if err := k.make(ctx, 1); err != nil {
			return nil, err
		}
		if rows, err = k.rows(ctx); err != nil {
			return nil, err
		}
	}
	if len(rows) == 0 {
		return nil, errors.New("audit: no audit signing key")
	}
	newest := rows[len(rows)-1]
	skey, _, err := k.open(newest)
	if err != nil {
		return nil, err
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("audit: signing key %s: %w", newest.ID, err)
	}
	return s, nil
}

// Rotate makes a new key, of the generation after the newest, which signs
// from now on; the older keys stay published. Of replicas that rotate at
// once, one stores its key.
func (k *Keys) Rotate(ctx context.Context) error {
	rows, err := k.rows(ctx)
	if err != nil {
		return err
	}
	gen := int64(1)
	if len(rows) > 0 {
		gen = rows[len(rows)-1].Generation + 1
	}
	return k.make(ctx, gen)
}

// make makes and stores a key of generation gen, which signs from now on,
// unless another replica stored that generation first.
func (k *Keys) make(ctx context.Context, gen int64) error {
	skey, vkey, err := note.GenerateKey(rand.Reader, k.name)
	if err != nil {
		return fmt.Errorf("audit: generate key: %w", err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return fmt.Errorf("audit: generate key: %w", err)
	}
	id := keyID(v)
	sl, err := k.sealer(id)
	if err != nil {
		return err
	}
	sealed, err := sl.Seal(skey, keysPublishedUntil)
	if err != nil {
		return fmt.Errorf("audit: seal key: %w", err)
	}
	now := k.now()
	err = k.ks.InsertSigningKey(ctx, store.SigningKey{
		ID: id, Purpose: KeyPurpose, Generation: gen, Algorithm: KeyAlgorithm,
		PublicKey: []byte(vkey), PrivateKey: []byte(sealed),
		CreatedAt: now, SignsFrom: now, PublishedUntil: keysPublishedUntil,
	})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("audit: store key: %w", err)
	}
	return nil // a conflict: another replica stored generation gen first
}

// VerifierKeys returns every published audit key in the note verifier
// format ("name+hash+key"), the newest, which signs, first.
func (k *Keys) VerifierKeys(ctx context.Context) ([]string, error) {
	rows, err := k.rows(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(rows))
	for _, row := range slices.Backward(rows) {
		out = append(out, string(row.PublicKey))
	}
	return out, nil
}

// Verifiers returns the published keys as verifiers of checkpoints, or
// nil when there is none. They are the database's: a reviewer checks
// against a copy of the keys kept outside it (ParseVerifierKeys), which
// whoever holds the database cannot replace.
func (k *Keys) Verifiers(ctx context.Context) (note.Verifiers, error) {
	list, err := k.VerifierKeys(ctx)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return ParseVerifierKeys(strings.Join(list, "\n"))
}

// rows reads the audit keys, oldest generation first, and checks that
// each is an Ed25519 note key whose ID is its own.
func (k *Keys) rows(ctx context.Context) ([]store.SigningKey, error) {
	rows, err := k.ks.SigningKeys(ctx, KeyPurpose, k.now())
	if err != nil {
		return nil, fmt.Errorf("audit: read keys: %w", err)
	}
	for _, row := range rows {
		v, err := note.NewVerifier(string(row.PublicKey))
		if row.Algorithm != KeyAlgorithm || err != nil || keyID(v) != row.ID {
			return nil, fmt.Errorf("audit: key %s (generation %d) is not the %s note key it names", row.ID, row.Generation, KeyAlgorithm)
		}
	}
	return rows, nil
}

// sealer seals and opens the private half of the key with id: the id is
// in the purpose, so a sealed key moved to another row does not open.
func (k *Keys) sealer(id string) (*seal.Sealer, error) {
	return sealerOf(k.sealKey, id)
}

// sealerOf is the sealer of the key id under sealKey.
func sealerOf(sealKey []byte, id string) (*seal.Sealer, error) {
	s, err := seal.New(sealKey, keySalt, "usher audit signing key "+id, 4096)
	if err != nil {
		return nil, fmt.Errorf("audit: seal: %w", err)
	}
	return s, nil
}

// open opens the private half of row with the seal key, or else with the
// first previous seal key that opens it (resealed true).
func (k *Keys) open(row store.SigningKey) (skey string, resealed bool, err error) {
	for i, key := range append([][]byte{k.sealKey}, k.previous...) {
		sl, serr := sealerOf(key, row.ID)
		if serr != nil {
			return "", false, serr
		}
		if err = sl.Open(string(row.PrivateKey), k.now(), &skey); err == nil {
			return skey, i > 0, nil
		}
	}
	return "", false, fmt.Errorf("audit: signing key %s (generation %d): %w", row.ID, row.Generation, err)
}

// A Resealer replaces the sealed private half of a stored key while it
// is still the one read (store.Store is one).
type Resealer interface {
	ResealSigningKey(ctx context.Context, id string, old, sealed []byte) (bool, error)
}

// Reseal seals again with the seal key, in rs, every audit key that a
// previous seal key sealed (KeysOptions.PreviousSealKeys), and returns
// how many it resealed. A key that no seal key opens is an error, and so
// is one resealed by another process meanwhile: run it again. Once it
// returns nil, the previous seal keys are no longer needed.
func (k *Keys) Reseal(ctx context.Context, rs Resealer) (int, error) {
	rows, err := k.rows(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, row := range rows {
		skey, resealed, err := k.open(row)
		if err != nil {
			return n, err
		}
		if !resealed {
			continue
		}
		sl, err := k.sealer(row.ID)
		if err != nil {
			return n, err
		}
		sealed, err := sl.Seal(skey, keysPublishedUntil)
		if err != nil {
			return n, fmt.Errorf("audit: seal key: %w", err)
		}
		ok, err := rs.ResealSigningKey(ctx, row.ID, row.PrivateKey, []byte(sealed))
		if err != nil {
			return n, fmt.Errorf("audit: reseal key %s: %w", row.ID, err)
		}
		if !ok {
			return n, fmt.Errorf("audit: key %s was changed while it was resealed: run the reseal again", row.ID)
		}
		n++
	}
	return n, nil
}

// keyID is the stored ID of the key v verifies: its name and hash, as a
// signature line of a note names it.
func keyID(v note.Verifier) string {
	return fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash())
}

// ParseVerifierKeys parses verifier keys in the note format, one a line
// (as /.well-known/usher-audit-key serves them); blank lines and lines
// starting with # are skipped.
func ParseVerifierKeys(text string) (note.Verifiers, error) {
	var list []note.Verifier
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := note.NewVerifier(line)
		if err != nil {
			return nil, fmt.Errorf("audit: verifier key %q: %w", line, err)
		}
		list = append(list, v)
	}
	if len(list) == 0 {
		return nil, errors.New("audit: no verifier key")
	}
	return note.VerifierList(list...), nil
}
