package broker

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	t.Parallel()
	c := newClock()
	ks := &memKeyStore{}
	keys := newTestKeyring(t, ks, c, &rotationOptions)
	b, err := New(keys, &Options{Issuer: testIssuer, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	fetches := &countingHandler{h: keys.JWKSHandler()}
	srv := newHTTPServer(t, fetches)

	remote, err := jwks.NewRemote(srv.URL, &jwks.RemoteOptions{Now: c.Now, Logger: quietLogger})
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
	if n := fetches.n.Load(); n != 1 {
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
	if n := fetches.n.Load(); n != 2 {
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
