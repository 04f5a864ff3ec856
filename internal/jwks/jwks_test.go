package jwks

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/testenv"
)

var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newClock returns a clock at a fixed time, which the test moves by hand.
func newClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

// jwksServer is a real JWKS endpoint on loopback that serves key k1 and
// counts its requests. When gate is set, each request first says it
// arrived and then waits for the gate to open.
type jwksServer struct {
	srv          *httptest.Server
	hits         atomic.Int64
	cacheControl atomic.Value // string
	gate         chan struct{}
	arrived      chan struct{}
}

func newJWKSServer(t *testing.T, gated bool) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.cacheControl.Store("")
	if gated {
		s.gate, s.arrived = make(chan struct{}), make(chan struct{}, 16)
	}
	body, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &testKey().PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if s.gate != nil {
			s.arrived <- struct{}{}
			select {
			case <-s.gate:
			case <-r.Context().Done():
				return
			}
		}
		if cc := s.cacheControl.Load().(string); cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		w.Write(body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func newTestRemote(t *testing.T, url string, c *testenv.Clock) *Remote {
	t.Helper()
	r, err := NewRemote(url, &RemoteOptions{Now: c.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestWaitersHonourTheirContexts: while a fetch is stuck on a slow key set
// server, a caller whose context ends returns at once with its context's
// error, neither waiting for the fetch nor stopping it for the others; the
// caller that started the fetch may give up too. When the server answers,
// the remaining caller gets the key from that one fetch.
func TestWaitersHonourTheirContexts(t *testing.T) {
	s := newJWKSServer(t, true)
	r := newTestRemote(t, s.srv.URL, newClock())

	type result struct {
		key *rsa.PublicKey
		err error
	}
	lookup := func(ctx context.Context) <-chan result {
		ch := make(chan result, 1)
		go func() {
			k, err := r.Key(ctx, "k1")
			ch <- result{k, err}
		}()
		return ch
	}
	starterCtx, cancelStarter := context.WithCancel(t.Context())
	starter := lookup(starterCtx)
	<-s.arrived // the fetch is under way, and stuck

	impatientCtx, cancelImpatient := context.WithCancel(t.Context())
	impatient := lookup(impatientCtx)
	patient := lookup(t.Context())
	cancelImpatient()
	if res := <-impatient; !errors.Is(res.err, context.Canceled) || res.key != nil {
		t.Fatalf("a waiter whose context ended: %v, %v; want context.Canceled", res.key, res.err)
	}
	cancelStarter()
	if res := <-starter; !errors.Is(res.err, context.Canceled) {
		t.Fatalf("the starter whose context ended: %v; want context.Canceled", res.err)
	}

	close(s.gate)
	if res := <-patient; res.err != nil || !res.key.Equal(&testKey().PublicKey) {
		t.Fatalf("the patient waiter: %v, %v", res.key, res.err)
	}
	if n := s.hits.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1 shared by every caller", n)
	}
}

// TestRefetchRateBounded: a kid not in the set fetches the set again at
// most once per MinRefreshInterval, however many ask at once.
func TestRefetchRateBounded(t *testing.T) {
	s := newJWKSServer(t, false)
	c := newClock()
	r := newTestRemote(t, s.srv.URL, c)
	unknown := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if _, err := r.Key(t.Context(), fmt.Sprint("made-up-", i)); !errors.Is(err, ErrUnknownKey) {
					t.Errorf("Key(made-up) = %v, want ErrUnknownKey", err)
				}
			})
		}
		wg.Wait()
	}
	step := func(name string, want int64) {
		t.Helper()
		if n := s.hits.Load(); n != want {
			t.Fatalf("%s: %d fetches, want %d", name, n, want)
		}
	}
	unknown(100)
	step("a flood of unknown kids on a cold cache", 1)
	unknown(100)
	step("a second flood within the interval", 1)
	if _, err := r.Key(t.Context(), "k1"); err != nil {
		t.Fatal(err)
	}
	step("a known kid", 1)
	c.Advance(10*time.Second - time.Nanosecond)
	unknown(10)
	step("just within the interval", 1)
	c.Advance(time.Nanosecond)
	unknown(100)
	step("a flood after the interval", 2)
}

// TestKeySetExpiry: a fetched set is used until the response's
// Cache-Control max-age, or RefreshInterval when it says none or more, but
// never for less than MinRefreshInterval.
func TestKeySetExpiry(t *testing.T) {
	for _, tt := range []struct {
		cacheControl string
		maxAge       time.Duration
	}{
		{"", 5 * time.Minute},
		{"public, max-age=60", time.Minute},
		{"max-age=86400", 5 * time.Minute},
		{"max-age=0", 10 * time.Second},
		{"no-store", 10 * time.Second},
		{"max-age=nonsense", 5 * time.Minute},
	} {
		t.Run(tt.cacheControl, func(t *testing.T) {
			s := newJWKSServer(t, false)
			s.cacheControl.Store(tt.cacheControl)
			c := newClock()
			r := newTestRemote(t, s.srv.URL, c)
			get := func(want int64) {
				t.Helper()
				if _, err := r.Key(t.Context(), "k1"); err != nil {
					t.Fatal(err)
				}
				if n := s.hits.Load(); n != want {
					t.Fatalf("at %s: %d fetches, want %d", c.Now().Format(time.TimeOnly), n, want)
				}
			}
			get(1)
			c.Advance(tt.maxAge - time.Nanosecond)
			get(1)
			c.Advance(time.Nanosecond)
			get(2)
		})
	}
}

// TestFailedFetch: a failed fetch is an error (not an unknown kid) until
// one succeeds; afterwards a failure keeps the fetched set in use.
func TestFailedFetch(t *testing.T) {
	c := newClock()
	var mode atomic.Value
	mode.Store("down")
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &testKey().PublicKey, KeyID: "k1"}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "down":
			http.Error(w, "no", http.StatusBadGateway)
		case "huge":
			w.Write([]byte(`{"keys":[],"pad":"`))
			w.Write([]byte(strings.Repeat("a", MaxDocumentBytes)))
			w.Write([]byte(`"}`))
		case "garbage":
			w.Write([]byte("<html>"))
		case "empty":
			w.Write([]byte(`{"keys":[]}`))
		default:
			w.Write(set)
		}
	}))
	t.Cleanup(srv.Close)
	r := newTestRemote(t, srv.URL, c)
	for _, tt := range []struct{ mode, want string }{
		{"down", "status 502"}, {"huge", "over 1048576 bytes"}, {"garbage", "invalid character"}, {"empty", "no RS256 signature keys"},
	} {
		mode.Store(tt.mode)
		c.Advance(10 * time.Second)
		if _, err := r.Key(t.Context(), "k1"); err == nil || errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Key = %v, want a fetch error mentioning %q", tt.mode, err, tt.want)
		}
	}
	mode.Store("up")
	c.Advance(10 * time.Second)
	if _, err := r.Key(t.Context(), "k1"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"down", "empty"} {
		mode.Store(m)
		c.Advance(time.Hour)
		if _, err := r.Key(t.Context(), "k1"); err != nil {
			t.Fatalf("%s, with the set fetched before: %v", m, err)
		}
	}
}

// TestKeepsOnlyUsableKeys: the set keeps only RSA signature keys of 2048
// bits or more, with a kid, for RS256, and ignores every other key.
func TestKeepsOnlyUsableKeys(t *testing.T) {
	good := testKey()
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
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	t.Cleanup(srv.Close)
	r := newTestRemote(t, srv.URL, newClock())
	for _, kid := range []string{"good", "no-alg-no-use"} {
		if k, err := r.Key(t.Context(), kid); err != nil || !k.Equal(&good.PublicKey) {
			t.Errorf("Key(%s) = %v", kid, err)
		}
	}
	for _, kid := range []string{"", "small", "enc", "ps256", "oct", "private", "unknown-type"} {
		if _, err := r.Key(t.Context(), kid); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("Key(%q) = %v, want ErrUnknownKey", kid, err)
		}
	}
}

// TestReloadWaitsForTheLoadUnderWay: Reload never returns the result of a
// load that started before it was called, while Refresh joins that load.
func TestReloadWaitsForTheLoadUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var loads atomic.Int64
		gate := make(chan struct{})
		c, err := NewCache(func(ctx context.Context, _ int64) (int64, time.Duration, error) {
			n := loads.Add(1)
			if n == 1 {
				<-gate
			}
			return n, 0, nil
		}, &CacheOptions{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		got := func(f func(context.Context) (int64, error)) <-chan int64 {
			ch := make(chan int64, 1)
			go func() {
				v, err := f(t.Context())
				if err != nil {
					t.Error(err)
				}
				ch <- v
			}()
			return ch
		}
		first := got(c.Get)
		synctest.Wait() // the first load is under way
		refreshed := got(c.Refresh)
		reloaded := got(c.Reload)
		synctest.Wait() // both wait for it
		close(gate)
		if v := <-first; v != 1 {
			t.Fatalf("Get = %d, want the first load", v)
		}
		if v := <-refreshed; v != 1 {
			t.Fatalf("Refresh = %d, want the load it joined", v)
		}
		if v := <-reloaded; v != 2 {
			t.Fatalf("Reload = %d, want a load of its own", v)
		}
	})
}

func TestNewRemoteURL(t *testing.T) {
	for _, tt := range []struct {
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
	} {
		if _, err := NewRemote(tt.url, &RemoteOptions{InsecureAllowHTTP: tt.insecure}); (err == nil) != tt.ok {
			t.Errorf("NewRemote(%q, insecure %v) = %v, want ok %v", tt.url, tt.insecure, err, tt.ok)
		}
	}
}
