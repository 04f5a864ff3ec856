package broker

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/jwks"
)

// countingHandler counts requests to h.
type countingHandler struct {
	h http.Handler
	n atomic.Int64
}

func (c *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	c.h.ServeHTTP(w, r)
}

// TestRemoteKeySet verifies, in "another process", tokens minted by the
// broker, through its JWKS over real HTTP.
func TestRemoteKeySet(t *testing.T) {
	c := newClock()
	ks := &memKeyStore{}
	keys := newTestKeyring(t, ks, c, &rotationOptions)
	b, err := New(keys, &Options{Issuer: testIssuer, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	jwks := &countingHandler{h: keys.JWKSHandler()}
	srv := newHTTPServer(t, jwks)

	remote, err := NewRemoteKeySet(srv.URL, &RemoteKeySetOptions{Now: c.Now, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(remote, &VerifierOptions{Issuer: testIssuer, Audience: testAudience, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	mintVerify := func() error {
		tok, err := b.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience})
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(t.Context(), tok.Raw)
		return err
	}
	if err := mintVerify(); err != nil {
		t.Fatal(err)
	}
	if err := mintVerify(); err != nil {
		t.Fatal(err)
	}
	if n := jwks.n.Load(); n != 1 {
		t.Fatalf("%d fetches for two tokens of one key, want 1", n)
	}

	// Unknown kids: at most one fetch per MinRefreshInterval.
	c.Advance(10 * time.Second)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			if _, err := remote.Key(t.Context(), fmt.Sprintf("random-%d", i)); !errors.Is(err, ErrUnknownKey) {
				t.Errorf("Key(random) = %v, want ErrUnknownKey", err)
			}
		})
	}
	wg.Wait()
	if n := jwks.n.Load(); n != 2 {
		t.Fatalf("%d fetches after a flood of unknown kids, want 2", n)
	}

	// A rotation is learned, by the refresh on the new kid.
	c.Advance(2*time.Hour - 10*time.Minute)
	if err := keys.Rotate(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.Set(ks.all("broker")[1].SignsFrom)
	if err := mintVerify(); err != nil {
		t.Fatalf("token of the new key: %v", err)
	}
}

// TestRemoteKeySetKeepsOnlyUsableKeys: the remote set ignores keys it must
// not verify with.
func TestRemoteKeySetKeepsOnlyUsableKeys(t *testing.T) {
	good := attackerKey() // any 2048-bit key
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &good.PublicKey, KeyID: "good", Algorithm: "RS256", Use: "sig"},
		{Key: &good.PublicKey, KeyID: "no-alg-no-use"},
		{Key: &good.PublicKey, Algorithm: "RS256", Use: "sig"}, // no kid
		{Key: &small.PublicKey, KeyID: "small", Algorithm: "RS256", Use: "sig"},
		{Key: &good.PublicKey, KeyID: "enc", Algorithm: "RS256", Use: "enc"},
		{Key: &good.PublicKey, KeyID: "ps256", Algorithm: "PS256", Use: "sig"},
		{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "oct", Algorithm: "HS256"},
		{Key: good, KeyID: "private", Algorithm: "RS256", Use: "sig"},
	}}
	body, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	body = []byte(strings.Replace(string(body), `{"keys":[`, `{"keys":[{"kty":"XYZ","kid":"unknown-type"},`, 1))
	srv := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	remote, err := NewRemoteKeySet(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kid := range []string{"good", "no-alg-no-use"} {
		if k, err := remote.Key(t.Context(), kid); err != nil || !k.Equal(&good.PublicKey) {
			t.Errorf("Key(%s) = %v", kid, err)
		}
	}
	for _, kid := range []string{"", "small", "enc", "ps256", "oct", "private", "unknown-type"} {
		if _, err := remote.Key(t.Context(), kid); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("Key(%q) = %v, want ErrUnknownKey", kid, err)
		}
	}
}

// TestRemoteKeySetFailures: a failed fetch is an error (not an unknown kid)
// until a fetch succeeds, and later failures keep the fetched set.
func TestRemoteKeySetFailures(t *testing.T) {
	c := newClock()
	var mode atomic.Value
	mode.Store("down")
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &attackerKey().PublicKey, KeyID: "k1"}}})
	srv := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "down":
			http.Error(w, "no", http.StatusBadGateway)
		case "huge":
			w.Write([]byte(`{"keys":[],"pad":"`))
			w.Write([]byte(strings.Repeat("a", jwks.MaxDocumentBytes)))
			w.Write([]byte(`"}`))
		case "garbage":
			w.Write([]byte("<html>"))
		default:
			w.Write(set)
		}
	}))
	remote, err := NewRemoteKeySet(srv.URL, &RemoteKeySetOptions{Now: c.Now, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	for m, want := range map[string]string{"down": "status 502", "huge": "over 1048576 bytes", "garbage": "invalid character"} {
		mode.Store(m)
		c.Advance(10 * time.Second)
		if _, err := remote.Key(t.Context(), "k1"); err == nil || errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Key = %v, want a fetch error mentioning %q", m, err, want)
		}
	}
	mode.Store("up")
	c.Advance(10 * time.Second)
	if _, err := remote.Key(t.Context(), "k1"); err != nil {
		t.Fatal(err)
	}
	mode.Store("down")
	c.Advance(time.Hour)
	if _, err := remote.Key(t.Context(), "k1"); err != nil {
		t.Fatalf("with the set fetched once and the server down: %v", err)
	}
}

func TestRemoteKeySetURL(t *testing.T) {
	tests := []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"https://usher.example.com/.well-known/jwks.json", false, true},
		{"http://127.0.0.1:8080/.well-known/jwks.json", false, true},
		{"http://[::1]:8080/jwks", false, true},
		{"http://localhost:8080/jwks", false, true},
		{"http://usher.example.com/.well-known/jwks.json", false, false},
		{"http://usher.example.com/.well-known/jwks.json", true, true},
		{"ftp://usher.example.com/jwks", true, false},
		{"/relative/jwks", false, false},
		{"", false, false},
	}
	for _, tt := range tests {
		_, err := NewRemoteKeySet(tt.url, &RemoteKeySetOptions{InsecureAllowHTTP: tt.insecure})
		if (err == nil) != tt.ok {
			t.Errorf("NewRemoteKeySet(%q, insecure %v) = %v, want ok %v", tt.url, tt.insecure, err, tt.ok)
		}
	}
}
