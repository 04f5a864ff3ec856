package identity_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usherhq/usher/internal/identity"
)

var quiet = slog.New(slog.DiscardHandler)

// flakyIssuer serves a discovery document on loopback after answering
// its first requests as fail says: a status, or 0 to drop the
// connection without an answer.
type flakyIssuer struct {
	srv      *httptest.Server
	requests atomic.Int32
	fail     []int // the answers before the document; the last repeats when always
	always   bool
}

func newFlakyIssuer(t *testing.T, always bool, fail ...int) *flakyIssuer {
	f := &flakyIssuer{fail: fail, always: always}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(f.requests.Add(1))
		if n <= len(f.fail) || f.always {
			switch status := f.fail[min(n, len(f.fail))-1]; status {
			case 0:
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close()
				}
			default:
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(status)
				w.Write([]byte("<html><body>Sorry, the issuer is down</body></html>"))
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"issuer":"` + f.srv.URL + `","jwks_uri":"` + f.srv.URL + `/keys"}`))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// TestDiscoveryRetry checks that New waits for an issuer that is
// unavailable — no answer, 5xx, 429 — trying again with backoff for
// Options.DiscoveryRetry, while a failure that will not pass (404) is
// returned at once, and that the error names the status, not the page.
// The issuers are real servers on loopback; the waits are synctest's.
func TestDiscoveryRetry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		always   bool
		fail     []int
		retry    time.Duration
		want     string // in the error; "": New succeeds
		requests int32
		elapsed  time.Duration
	}{
		{name: "recovers from 503s", fail: []int{503, 503}, requests: 3, elapsed: 3 * time.Second},
		{name: "recovers from dropped connections and a 429", fail: []int{0, 0, 429}, requests: 4, elapsed: 7 * time.Second},
		{name: "unavailable throughout", always: true, fail: []int{502},
			want: "502 Bad Gateway (tried 10 times over 1m30s)", requests: 10, elapsed: 90 * time.Second},
		{name: "no answer throughout, shorter retry", always: true, fail: []int{0}, retry: 10 * time.Second,
			want: "the issuer is unavailable", requests: 5, elapsed: 10 * time.Second},
		{name: "404 at once", always: true, fail: []int{404}, want: "answered 404 Not Found", requests: 1},
		{name: "one attempt", always: true, fail: []int{503}, retry: -1, want: "answered 503 Service Unavailable", requests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFlakyIssuer(t, tc.always, tc.fail...)
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				_, err := identity.New(t.Context(), &identity.Options{
					Issuer: f.srv.URL, Audiences: []string{apiClientID}, RequiredScopes: []string{"usher.api"},
					DiscoveryRetry: tc.retry, Logger: quiet,
					// No idle connection outlives a request: synctest's clock
					// moves only while nothing in the bubble waits on the network.
					HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
				})
				switch {
				case tc.want == "" && err != nil:
					t.Fatalf("New: %v", err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "Sorry")):
					t.Fatalf("New: %v, want %q and not the page", err, tc.want)
				}
				if got := f.requests.Load(); got != tc.requests {
					t.Errorf("%d requests, want %d", got, tc.requests)
				}
				if got := time.Since(start); got != tc.elapsed {
					t.Errorf("New took %s, want %s", got, tc.elapsed)
				}
			})
		})
	}
}

// TestDiscoveryRetryStops checks that New stops waiting when its context
// ends.
func TestDiscoveryRetryStops(t *testing.T) {
	f := newFlakyIssuer(t, true, 503)
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := identity.New(ctx, &identity.Options{
			Issuer: f.srv.URL, Audiences: []string{apiClientID}, RequiredScopes: []string{"usher.api"}, Logger: quiet,
			HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		})
		if err == nil || !strings.Contains(err.Error(), "stopped while waiting") {
			t.Fatalf("New: %v, want it to stop with its context", err)
		}
	})
}
