package broker

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
)

// memKeyStore is a complete in-memory KeyStore with the store's contract:
// ErrConflict on a duplicate ID or (Purpose, Generation), keys published
// after now, oldest generation first, and copies in and out.
type memKeyStore struct {
	mu          sync.Mutex
	rows        []store.SigningKey
	unavailable atomic.Bool // when set, every call fails, as a database that is down
}

var errUnavailable = errors.New("key store unavailable")

func (m *memKeyStore) InsertSigningKey(_ context.Context, k store.SigningKey) error {
	if m.unavailable.Load() {
		return errUnavailable
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.rows {
		if r.ID == k.ID || (r.Purpose == k.Purpose && r.Generation == k.Generation) {
			return store.ErrConflict
		}
	}
	m.rows = append(m.rows, cloneKey(k))
	return nil
}

func (m *memKeyStore) SigningKeys(_ context.Context, purpose string, now time.Time) ([]store.SigningKey, error) {
	if m.unavailable.Load() {
		return nil, errUnavailable
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.SigningKey
	for _, r := range m.rows {
		if r.Purpose == purpose && r.PublishedUntil.After(now) {
			out = append(out, cloneKey(r))
		}
	}
	slices.SortFunc(out, func(a, b store.SigningKey) int { return cmp.Compare(a.Generation, b.Generation) })
	return out, nil
}

// all returns every row of purpose, whatever its publication.
func (m *memKeyStore) all(purpose string) []store.SigningKey {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.SigningKey
	for _, r := range m.rows {
		if r.Purpose == purpose {
			out = append(out, cloneKey(r))
		}
	}
	return out
}

// update rewrites the row with id, as an attacker with database access could.
func (m *memKeyStore) update(id string, f func(*store.SigningKey)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.rows {
		if m.rows[i].ID == id {
			f(&m.rows[i])
		}
	}
}

func cloneKey(k store.SigningKey) store.SigningKey {
	k.PublicKey = bytes.Clone(k.PublicKey)
	k.PrivateKey = bytes.Clone(k.PrivateKey)
	return k
}

// countingKeyStore counts the reads that reach a real KeyStore.
type countingKeyStore struct {
	KeyStore
	reads atomic.Int64
}

func (c *countingKeyStore) SigningKeys(ctx context.Context, purpose string, now time.Time) ([]store.SigningKey, error) {
	c.reads.Add(1)
	return c.KeyStore.SigningKeys(ctx, purpose, now)
}

// newClock returns a clock at a fixed time, which the test moves by hand.
func newClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

var testSealKey = bytes.Repeat([]byte{7}, SealKeySize)

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// newTestKeyring returns a started keyring of purpose "broker" on ks.
func newTestKeyring(t testing.TB, ks KeyStore, c *testenv.Clock, opts *KeyringOptions) *Keyring {
	t.Helper()
	var o KeyringOptions
	if opts != nil {
		o = *opts
	}
	o.Now = c.Now
	if o.Logger == nil {
		o.Logger = quietLogger
	}
	k, err := NewKeyring(ks, "broker", testSealKey, &o)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

const (
	testIssuer   = "https://usher.example.com"
	testAudience = "https://usher.example.com/mcp"
)

// fixture is a started keyring, a broker and a verifier sharing one clock.
type fixture struct {
	clock    *testenv.Clock
	ks       *memKeyStore
	keys     *Keyring
	broker   *Broker
	verifier *Verifier
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{clock: newClock(), ks: &memKeyStore{}}
	f.keys = newTestKeyring(t, f.ks, f.clock, nil)
	var err error
	f.broker, err = New(f.keys, &Options{Issuer: testIssuer, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	f.verifier, err = NewVerifier(f.keys, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// signer returns the keyring's current kid and private key.
func (f *fixture) signer(t testing.TB) (string, *rsa.PrivateKey) {
	t.Helper()
	kid, key, err := f.keys.Signer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return kid, key
}

// attackerKey is an RSA key that is not in any keyring.
var attackerKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// compact builds a compact JWS from any header and claims, signed by sign
// over the signing input. It is written independently of the package's own
// signing code, so a bug there cannot hide here.
func compact(t testing.TB, header, claims any, sign func(input []byte) []byte) string {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	p, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	input := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p)
	return input + "." + base64.RawURLEncoding.EncodeToString(sign([]byte(input)))
}

// rs256 signs with key.
func rs256(t testing.TB, key *rsa.PrivateKey) func([]byte) []byte {
	return func(input []byte) []byte {
		d := sha256.Sum256(input)
		sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, d[:])
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
}

// noSignature signs with nothing.
func noSignature([]byte) []byte { return nil }

// validHeader and validClaims describe a token that verifies at now with kid.
func validHeader(kid string) map[string]any {
	return map[string]any{"alg": "RS256", "typ": "at+jwt", "kid": kid}
}

func validClaims(now time.Time) map[string]any {
	return map[string]any{
		"iss":       testIssuer,
		"sub":       "https://login.example.com/tenant/user-1",
		"aud":       testAudience,
		"iat":       now.Unix(),
		"nbf":       now.Unix(),
		"exp":       now.Add(5 * time.Minute).Unix(),
		"jti":       "jti-1",
		"scope":     "mcp:invoke",
		"client_id": "usher-assistant",
		"act":       map[string]any{"sub": "usher-assistant"},
	}
}

// newHTTPServer serves h on loopback for the test.
func newHTTPServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// httpDo sends a body-less request and returns the response, body drained.
func httpDo(t testing.TB, method, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// httpGet fetches url.
func httpGet(t testing.TB, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// tokenKID reads the kid from a token's header without verifying it.
func tokenKID(t testing.TB, raw string) string {
	t.Helper()
	h, _, _ := strings.Cut(raw, ".")
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	var header struct {
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(b, &header); err != nil {
		t.Fatal(err)
	}
	return header.Kid
}
