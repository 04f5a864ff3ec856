package broker

import (
	"cmp"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/jwks"
	"github.com/usherhq/usher/store"
)

// Algorithm is the only JWS algorithm the broker signs with and accepts.
const Algorithm = "RS256"

// clockSkew is the most a verifier may tolerate past a token's expiry
// (MaxLeeway). A retired key stays published this much longer, so a token
// that a verifier still accepts can still be checked.
const clockSkew = MaxLeeway

// minKeyBits is the smallest RSA modulus the broker generates, loads or
// accepts from a remote key set.
const minKeyBits = 2048

// Keyring errors.
var (
	// ErrUnknownKey reports that no published key has the requested kid,
	// even after reloading the key set (at a bounded rate). It is
	// jwks.ErrUnknownKey, so that a Keyring and a jwks.Remote say it alike.
	ErrUnknownKey = jwks.ErrUnknownKey
	// ErrNoSigningKey reports that no key may sign now and none could be
	// created.
	ErrNoSigningKey = errors.New("broker: no signing key can sign now")
)

// KeyStore is the part of the database a Keyring uses; store.Store
// satisfies it.
type KeyStore interface {
	// InsertSigningKey stores a new key; a duplicate ID or (Purpose,
	// Generation) fails with store.ErrConflict.
	InsertSigningKey(ctx context.Context, k store.SigningKey) error
	// SigningKeys returns the purpose's keys published after now, oldest
	// generation first.
	SigningKeys(ctx context.Context, purpose string, now time.Time) ([]store.SigningKey, error)
}

// KeyringOptions configures a Keyring. The zero value of every field selects
// its default.
type KeyringOptions struct {
	// KeyBits is the RSA modulus size of new keys: 2048, 3072 or 4096.
	// Default 2048.
	KeyBits int
	// RotationPeriod is how long each key signs before its successor takes
	// over. Default 30 days. It must exceed PublishAhead + CheckInterval.
	RotationPeriod time.Duration
	// PublishAhead is how long a new key is published in the key set before
	// it starts signing, so that verifiers which cached the key set (for at
	// most min(5 min, PublishAhead/2), the JWKS Cache-Control max-age) and
	// other replicas (which reload every CheckInterval) learn it first.
	// Default 10 min. It must exceed CheckInterval.
	PublishAhead time.Duration
	// MaxTokenLifetime is the longest lifetime of any token these keys sign.
	// A key stops signing this long, plus 30 s of clock skew, before it
	// leaves the key set, so every token it signed expires while it is
	// still published. Default 15 min (the broker's maximum); a purpose
	// that signs longer-lived tokens must raise it.
	MaxTokenLifetime time.Duration
	// CheckInterval is how often the loop run by Start checks whether a
	// rotation is due, and how long a loaded key set is used before it is
	// read again. Default 1 min.
	CheckInterval time.Duration
	// MinRefreshInterval bounds reloads triggered by a kid the keyring does
	// not know (or by finding no key able to sign): at most one per
	// interval, so a flood of tokens with random kids causes no flood of
	// database reads. Default 10 s.
	MinRefreshInterval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives rotation events and background errors. Default
	// slog.Default().
	Logger *slog.Logger
	// PreviousSealKeys are seal keys the private keys may still be sealed
	// with, from before the seal key was replaced: they open keys, never
	// seal them, until Reseal has sealed every key with the seal key.
	PreviousSealKeys [][]byte
}

// Keyring holds one purpose's RS256 signing keys: it generates them, stores
// them with their private halves sealed (AES-256-GCM), rotates them on a
// schedule, publishes them as a JWKS and finds them by kid for verification.
// It is generic over purpose: the broker uses "broker", the development
// OIDC provider "devoidc". Any number of replicas may share one store.
//
// A key's life: it is inserted and published PublishAhead before it starts
// signing; it signs for RotationPeriod; it stays published for
// MaxTokenLifetime + 30 s after that, then leaves the key set.
type Keyring struct {
	ks      KeyStore
	purpose string
	sealer  *sealer
	// previous open what an earlier seal key sealed (PreviousSealKeys).
	previous []*sealer
	opts     KeyringOptions

	keys *jwks.Cache[*keySnapshot]

	rotateMu sync.Mutex // one rotation at a time in this process

	runMu  sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewKeyring returns the keyring of purpose over ks. sealKey (32 bytes, see
// LoadOrCreateSealKey and ParseSealKey) seals the private keys at rest;
// every replica sharing ks must use the same one. Nil opts selects the
// defaults. NewKeyring does no I/O: keys are loaded on first use, and
// created by Start (or Rotate, or a Signer call that finds none).
func NewKeyring(ks KeyStore, purpose string, sealKey []byte, opts *KeyringOptions) (*Keyring, error) {
	var o KeyringOptions
	if opts != nil {
		o = *opts
	}
	if o.KeyBits == 0 {
		o.KeyBits = 2048
	}
	if o.RotationPeriod == 0 {
		o.RotationPeriod = 30 * 24 * time.Hour
	}
	if o.PublishAhead == 0 {
		o.PublishAhead = 10 * time.Minute
	}
	if o.MaxTokenLifetime == 0 {
		o.MaxTokenLifetime = MaxTokenLifetime
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = time.Minute
	}
	if o.MinRefreshInterval == 0 {
		o.MinRefreshInterval = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}

	var errs []error
	if ks == nil {
		errs = append(errs, errors.New("a key store is required"))
	}
	if !validPurpose(purpose) {
		errs = append(errs, fmt.Errorf("purpose %q must be 1 to 64 of a-z, 0-9, '.', '_', '-'", purpose))
	}
	s, err := newSealer(sealKey)
	if err != nil {
		errs = append(errs, err)
	}
	var previous []*sealer
	for i, key := range o.PreviousSealKeys {
		p, err := newSealer(key)
		if err != nil {
			errs = append(errs, fmt.Errorf("previous seal key %d: %w", i+1, err))
		}
		previous = append(previous, p)
	}
	if o.KeyBits != 2048 && o.KeyBits != 3072 && o.KeyBits != 4096 {
		errs = append(errs, fmt.Errorf("KeyBits must be 2048, 3072 or 4096, got %d", o.KeyBits))
	}
	if o.CheckInterval < 0 || o.MinRefreshInterval < 0 || o.MaxTokenLifetime < 0 {
		errs = append(errs, errors.New("CheckInterval, MinRefreshInterval and MaxTokenLifetime must not be negative"))
	}
	if o.PublishAhead <= o.CheckInterval {
		errs = append(errs, fmt.Errorf("PublishAhead (%s) must exceed CheckInterval (%s)", o.PublishAhead, o.CheckInterval))
	}
	if o.RotationPeriod <= o.PublishAhead+o.CheckInterval {
		errs = append(errs, fmt.Errorf("RotationPeriod (%s) must exceed PublishAhead + CheckInterval (%s)", o.RotationPeriod, o.PublishAhead+o.CheckInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("broker: keyring options: %w", err)
	}
	k := &Keyring{ks: ks, purpose: purpose, sealer: s, previous: previous, opts: o}
	k.keys, err = jwks.NewCache(k.load, &jwks.CacheOptions{
		MaxAge: o.CheckInterval, MinRefreshInterval: o.MinRefreshInterval,
		Now: o.Now, Logger: o.Logger, Name: "signing keys " + purpose,
	})
	if err != nil {
		return nil, fmt.Errorf("broker: keyring options: %w", err)
	}
	return k, nil
}

// validPurpose reports whether p is a short lower-case name; in particular
// it contains no NUL, which separates fields in the seal's additional data.
func validPurpose(p string) bool {
	if len(p) == 0 || len(p) > 64 {
		return false
	}
	for _, c := range []byte(p) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Start makes sure a signing key exists (creating the first one, or a
// successor that is due), then rotates on schedule in the background until
// Stop. ctx bounds this first step only; cancelling it later does not stop
// the loop.
func (k *Keyring) Start(ctx context.Context) error {
	k.runMu.Lock()
	defer k.runMu.Unlock()
	if k.done != nil {
		return errors.New("broker: keyring already started")
	}
	if err := k.Rotate(ctx); err != nil {
		return err
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.cancel, k.done = cancel, make(chan struct{})
	go k.loop(loopCtx, k.done)
	return nil
}

// Stop ends the rotation loop and waits for it. It is idempotent and safe
// to call without Start.
func (k *Keyring) Stop() {
	k.runMu.Lock()
	defer k.runMu.Unlock()
	if k.done == nil {
		return
	}
	k.cancel()
	<-k.done
	k.cancel, k.done = nil, nil
}

func (k *Keyring) loop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(k.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := k.Rotate(ctx); err != nil && ctx.Err() == nil {
				k.opts.Logger.Error("broker: key rotation failed", "purpose", k.purpose, "err", err)
			}
		}
	}
}

// Rotate reads the key set and inserts a new key if one is due: when there
// is no published key, or when the newest key's signing period ends within
// PublishAhead + CheckInterval. The new key signs from PublishAhead later
// (sooner only if no other key could sign by then). When replicas race, the
// store's uniqueness of (purpose, generation) lets one insert win; the
// others reload and use its key. Start calls Rotate on a schedule.
func (k *Keyring) Rotate(ctx context.Context) error {
	k.rotateMu.Lock()
	defer k.rotateMu.Unlock()
	s, err := k.keys.Reload(ctx)
	if err != nil {
		return err
	}
	if _, due := k.due(s.windows(), k.opts.Now()); !due {
		return nil
	}
	// Decide again, and choose the generation, on one read of every key
	// ever stored (all are published after the Unix epoch). A replica that
	// rotated since the reload has either made rotation no longer due, or
	// chosen the same generation, and the store refuses one of the two.
	rows, err := k.ks.SigningKeys(ctx, k.purpose, time.Unix(0, 0).UTC())
	if err != nil {
		return fmt.Errorf("broker: read %s signing keys: %w", k.purpose, err)
	}
	all := make([]window, len(rows))
	for i, row := range rows {
		all[i] = window{generation: row.Generation, signsFrom: row.SignsFrom, publishedUntil: row.PublishedUntil}
	}
	slices.SortFunc(all, func(a, b window) int { return cmp.Compare(a.generation, b.generation) })
	now := k.opts.Now()
	if signsFrom, due := k.due(all, now); due {
		gen := int64(1)
		if len(all) > 0 {
			gen = all[len(all)-1].generation + 1
		}
		row, err := k.newKey(gen, now, signsFrom)
		if err != nil {
			return err
		}
		switch err := k.ks.InsertSigningKey(ctx, row); {
		case errors.Is(err, store.ErrConflict):
			k.opts.Logger.Info("broker: another replica rotated first", "purpose", k.purpose, "generation", gen)
		case err != nil:
			return fmt.Errorf("broker: store %s signing key: %w", k.purpose, err)
		default:
			k.opts.Logger.Info("broker: new signing key", "purpose", k.purpose, "kid", row.ID,
				"generation", gen, "signs_from", row.SignsFrom, "published_until", row.PublishedUntil)
		}
	}
	_, err = k.keys.Reload(ctx)
	return err
}

// due reports whether a new key is due at now, and when it should start
// signing, given the windows of keys ordered by generation.
func (k *Keyring) due(keys []window, now time.Time) (signsFrom time.Time, due bool) {
	var newest *window
	for i := range keys {
		if keys[i].publishedUntil.After(now) {
			newest = &keys[i]
		}
	}
	if newest == nil {
		return now, true // first start, or every key expired while nothing ran
	}
	// A successor published ahead is the newest key, and its end is
	// RotationPeriod away: not due.
	end := k.signsUntil(*newest)
	if now.Before(end.Add(-k.opts.PublishAhead - k.opts.CheckInterval)) {
		return time.Time{}, false
	}
	signsFrom = now.Add(k.opts.PublishAhead)
	if signsFrom.After(end) {
		// Late (nothing ran for a while): start when the current key
		// stops, or at once if it already has, rather than leave a gap.
		signsFrom = later(now, end)
	}
	return signsFrom, true
}

// newKey generates a key of generation gen and seals its private half.
func (k *Keyring) newKey(gen int64, now, signsFrom time.Time) (store.SigningKey, error) {
	priv, err := rsa.GenerateKey(rand.Reader, k.opts.KeyBits)
	if err != nil {
		return store.SigningKey{}, fmt.Errorf("broker: generate key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return store.SigningKey{}, fmt.Errorf("broker: encode public key: %w", err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return store.SigningKey{}, fmt.Errorf("broker: encode private key: %w", err)
	}
	defer clear(privDER)
	kid, err := thumbprint(&priv.PublicKey)
	if err != nil {
		return store.SigningKey{}, err
	}
	return store.SigningKey{
		ID:             kid,
		Purpose:        k.purpose,
		Generation:     gen,
		Algorithm:      Algorithm,
		PublicKey:      pubDER,
		PrivateKey:     k.sealer.seal(privDER, k.purpose, kid),
		CreatedAt:      now,
		SignsFrom:      signsFrom,
		PublishedUntil: signsFrom.Add(k.opts.RotationPeriod + k.opts.MaxTokenLifetime + clockSkew),
	}, nil
}

// signsUntil is when a key must stop signing so that every token it signs
// expires (plus clock skew) while it is still published.
func (k *Keyring) signsUntil(w window) time.Time {
	return w.publishedUntil.Add(-k.opts.MaxTokenLifetime - clockSkew)
}

// Signer returns the key to sign with now: the newest key whose signing
// period has begun and not ended. When the loaded set has none, it reloads
// and, if still none, rotates (a first use, or a keyring that was not
// running for longer than its keys live).
func (k *Keyring) Signer(ctx context.Context) (kid string, key *rsa.PrivateKey, err error) {
	if s, err := k.keys.Get(ctx); err == nil {
		if sk := k.signer(s, k.opts.Now()); sk != nil {
			return sk.kid, sk.priv, nil
		}
	}
	if err := k.Rotate(ctx); err != nil {
		return "", nil, err
	}
	if sk := k.signer(k.keys.Peek(), k.opts.Now()); sk != nil {
		return sk.kid, sk.priv, nil
	}
	return "", nil, ErrNoSigningKey
}

// signer picks the newest key of s that may sign at now, or nil.
func (k *Keyring) signer(s *keySnapshot, now time.Time) *signingKey {
	if s == nil {
		return nil
	}
	for _, key := range slices.Backward(s.keys) {
		if !key.signsFrom.After(now) && now.Before(k.signsUntil(key.window)) {
			return key
		}
	}
	return nil
}

// Key returns the public key with the given kid if it is published now. An
// unknown kid reloads the key set at most once per MinRefreshInterval;
// otherwise the error is ErrUnknownKey. Key implements KeySource.
func (k *Keyring) Key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	s, err := k.keys.Get(ctx)
	if err != nil {
		return nil, err
	}
	if key := s.published(kid, k.opts.Now()); key != nil {
		return key.pub, nil
	}
	if s, err = k.keys.Refresh(ctx); err != nil {
		return nil, err
	}
	if key := s.published(kid, k.opts.Now()); key != nil {
		return key.pub, nil
	}
	return nil, ErrUnknownKey
}

// PublicKeys returns every published key, public parts only, each with its
// kid, alg "RS256" and use "sig", oldest first.
func (k *Keyring) PublicKeys(ctx context.Context) (jose.JSONWebKeySet, error) {
	s, err := k.keys.Get(ctx)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	now := k.opts.Now()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, key := range s.keys {
		if key.publishedUntil.After(now) {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: key.pub, KeyID: key.kid, Algorithm: Algorithm, Use: "sig"})
		}
	}
	return set, nil
}

// JWKSHandler serves PublicKeys as application/json to GET and HEAD, with a
// Cache-Control max-age of min(5 min, PublishAhead/2), so a cached copy
// always learns a new key before it signs.
func (k *Keyring) JWKSHandler() http.Handler {
	maxAge := min(5*time.Minute, k.opts.PublishAhead/2)
	cacheControl := fmt.Sprintf("public, max-age=%d", int(maxAge/time.Second))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		set, err := k.PublicKeys(r.Context())
		var body []byte
		if err == nil {
			body, err = json.Marshal(set)
		}
		if err != nil {
			k.opts.Logger.Error("broker: serve key set", "purpose", k.purpose, "err", err)
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "key set unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", cacheControl)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Write(body)
	})
}

// load reads, checks and opens the purpose's published keys. Any key that
// fails a check fails the whole load: a row that does not open means a wrong
// seal key or tampering, never a reason to carry on with fewer keys.
func (k *Keyring) load(ctx context.Context, prev *keySnapshot) (*keySnapshot, time.Duration, error) {
	rows, err := k.ks.SigningKeys(ctx, k.purpose, k.opts.Now())
	if err != nil {
		return nil, 0, fmt.Errorf("broker: read %s signing keys: %w", k.purpose, err)
	}
	s := &keySnapshot{keys: make([]*signingKey, 0, len(rows))}
	for _, row := range rows {
		key, err := k.openKey(prev, row)
		if err != nil {
			return nil, 0, fmt.Errorf("broker: %s signing key %s (generation %d): %w", k.purpose, row.ID, row.Generation, err)
		}
		s.keys = append(s.keys, key)
	}
	slices.SortFunc(s.keys, func(a, b *signingKey) int { return cmp.Compare(a.generation, b.generation) })
	return s, 0, nil
}

// openKey checks a stored key and opens its private half, reusing the
// already opened key when the row's key material is unchanged.
func (k *Keyring) openKey(prev *keySnapshot, row store.SigningKey) (*signingKey, error) {
	key := &signingKey{
		window:    window{generation: row.Generation, signsFrom: row.SignsFrom, publishedUntil: row.PublishedUntil},
		kid:       row.ID,
		publicDER: row.PublicKey,
		sealed:    row.PrivateKey,
	}
	if old := prev.byKID(row.ID); old != nil && string(old.publicDER) == string(row.PublicKey) && string(old.sealed) == string(row.PrivateKey) {
		key.pub, key.priv = old.pub, old.priv
		return key, nil
	}
	if row.Algorithm != Algorithm {
		return nil, fmt.Errorf("algorithm %q is not %s", row.Algorithm, Algorithm)
	}
	parsed, err := x509.ParsePKIXPublicKey(row.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	pub, ok := parsed.(*rsa.PublicKey)
	if !ok || pub.N.BitLen() < minKeyBits {
		return nil, fmt.Errorf("public key is not an RSA key of at least %d bits", minKeyBits)
	}
	if kid, err := thumbprint(pub); err != nil || kid != row.ID {
		return nil, errors.New("kid is not the thumbprint of the public key")
	}
	der, _, err := k.open(row)
	if err != nil {
		return nil, err
	}
	defer clear(der)
	parsedPriv, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	priv, ok := parsedPriv.(*rsa.PrivateKey)
	if !ok || !priv.PublicKey.Equal(pub) {
		return nil, errors.New("private key does not match the public key")
	}
	key.pub, key.priv = pub, priv
	return key, nil
}

// open opens the private half of row with the seal key, or else with
// the first previous seal key that opens it (resealed true).
func (k *Keyring) open(row store.SigningKey) (der []byte, resealed bool, err error) {
	der, err = k.sealer.open(row.PrivateKey, k.purpose, row.ID)
	if err == nil {
		return der, false, nil
	}
	for _, p := range k.previous {
		if der, err := p.open(row.PrivateKey, k.purpose, row.ID); err == nil {
			return der, true, nil
		}
	}
	return nil, false, err
}

// A Resealer replaces the sealed private half of a stored key while it
// is still the one read (store.Store is one).
type Resealer interface {
	ResealSigningKey(ctx context.Context, id string, old, sealed []byte) (bool, error)
}

// Reseal seals again with the seal key, in rs, every published key of
// the purpose that a previous seal key sealed (PreviousSealKeys), and
// returns how many it resealed. A key that no seal key opens is an
// error (ErrUnseal), and so is one resealed by another process meanwhile
// with other bytes: run it again. Once it returns nil, the previous seal
// keys are no longer needed.
func (k *Keyring) Reseal(ctx context.Context, rs Resealer) (int, error) {
	rows, err := k.ks.SigningKeys(ctx, k.purpose, k.opts.Now())
	if err != nil {
		return 0, fmt.Errorf("broker: read %s signing keys: %w", k.purpose, err)
	}
	n := 0
	for _, row := range rows {
		der, resealed, err := k.open(row)
		if err != nil {
			return n, fmt.Errorf("broker: %s signing key %s (generation %d): %w", k.purpose, row.ID, row.Generation, err)
		}
		if !resealed {
			clear(der)
			continue
		}
		sealed := k.sealer.seal(der, k.purpose, row.ID)
		clear(der)
		ok, err := rs.ResealSigningKey(ctx, row.ID, row.PrivateKey, sealed)
		if err != nil {
			return n, fmt.Errorf("broker: reseal %s signing key %s: %w", k.purpose, row.ID, err)
		}
		if !ok {
			return n, fmt.Errorf("broker: %s signing key %s was changed while it was resealed: run the reseal again", k.purpose, row.ID)
		}
		n++
	}
	return n, nil
}

// thumbprint is the RFC 7638 JWK thumbprint (SHA-256, base64url) of pub:
// the kid of a key.
func thumbprint(pub *rsa.PublicKey) (string, error) {
	jwk := jose.JSONWebKey{Key: pub}
	tp, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("broker: key thumbprint: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// window is when a key signs and when it leaves the key set.
type window struct {
	generation     int64
	signsFrom      time.Time
	publishedUntil time.Time
}

// signingKey is a loaded key.
type signingKey struct {
	window
	kid  string
	pub  *rsa.PublicKey
	priv *rsa.PrivateKey

	publicDER, sealed []byte // as stored, to reuse the opened key on reload
}

// keySnapshot is an immutable loaded key set.
type keySnapshot struct {
	keys []*signingKey // oldest generation first
}

// byKID returns the key with kid, or nil. A key set holds a handful of
// keys, so a scan beats a map.
func (s *keySnapshot) byKID(kid string) *signingKey {
	if s == nil {
		return nil
	}
	for _, key := range s.keys {
		if key.kid == kid {
			return key
		}
	}
	return nil
}

// published returns the key with kid if it is published at now, or nil.
func (s *keySnapshot) published(kid string, now time.Time) *signingKey {
	if key := s.byKID(kid); key != nil && key.publishedUntil.After(now) {
		return key
	}
	return nil
}

// windows returns the windows of the keys, oldest generation first.
func (s *keySnapshot) windows() []window {
	if s == nil {
		return nil
	}
	ws := make([]window, len(s.keys))
	for i, key := range s.keys {
		ws[i] = key.window
	}
	return ws
}
