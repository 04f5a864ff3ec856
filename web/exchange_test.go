package web

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/usherhq/usher/store/storetest"
)

// lockedBuffer is a log that the server writes and the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTokenEndpointFailures checks that a token endpoint that fails
// itself (5xx) or does not answer is "could not be reached" (502, worth
// another try), one that refuses the code (4xx) is a refusal (400), and
// that the log names the status and the OAuth error but not the body.
func TestTokenEndpointFailures(t *testing.T) {
	var status atomic.Int32
	token := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status.Load() >= 500 {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(int(status.Load()))
			fmt.Fprint(w, "<html><body>Service Unavailable</body></html>")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(status.Load()))
		fmt.Fprint(w, `{"error":"invalid_grant","error_description":"AADSTS70008: The provided authorization code has expired."}`)
	}))
	t.Cleanup(token.Close)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()

	for _, tc := range []struct {
		name     string
		status   int32
		url      string
		want     int
		text     string
		log, not string
	}{
		{"503", http.StatusServiceUnavailable, token.URL, http.StatusBadGateway, "could not be reached", "unavailable: it answered 503 Service Unavailable", "<html>"},
		{"500", http.StatusInternalServerError, token.URL, http.StatusBadGateway, "could not be reached", "unavailable: it answered 500 Internal Server Error", "<html>"},
		{"400 invalid_grant", http.StatusBadRequest, token.URL, http.StatusBadRequest, "did not confirm who you are",
			"refused the code: 400 Bad Request: invalid_grant: AADSTS70008", "unavailable"},
		{"no answer", 0, down.URL, http.StatusBadGateway, "could not be reached", "unavailable: Post", "<html>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status.Store(int32(tc.status))
			logs := &lockedBuffer{}
			e := newEnvWith(t, storetest.NewSQLite(t), func(o *Options) {
				o.Endpoints.TokenURL = tc.url
				o.Logger = slog.New(slog.NewTextHandler(logs, nil))
			})
			b := e.browser(t)
			login := b.get(e.url + "/auth/login")
			r := b.get(b.authorize(login.location(), "alice"))
			noSession(t, r)
			if r.status != tc.want || !strings.Contains(r.body, tc.text) || !strings.Contains(r.body, "Try again") || strings.Contains(r.body, "Service Unavailable") {
				t.Errorf("callback: %d, want %d and %q with Try again: %s", r.status, tc.want, tc.text, r.body)
			}
			if l := logs.String(); !strings.Contains(l, tc.log) || strings.Contains(l, tc.not) {
				t.Errorf("log, want %q and not %q: %s", tc.log, tc.not, l)
			}
		})
	}
}
