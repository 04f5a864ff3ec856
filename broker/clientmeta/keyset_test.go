package clientmeta_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/clientmeta"
)

func TestFetchKeySet(t *testing.T) {
	set := []byte(`{"keys":[]}`)
	s := newDocServer(t, false, serveBody("application/jwk-set+json", set, "Cache-Control", "max-age=600"))
	f := fetcher(t, s, nil)
	body, ttl, err := f.FetchKeySet(t.Context(), s.id("example.com", "/jwks.json"))
	if err != nil || string(body) != string(set) || ttl != 10*time.Minute {
		t.Fatalf("FetchKeySet = %q, %s, %v; want the set for 10m", body, ttl, err)
	}
	// No cache here: each call fetches.
	if _, _, err := f.FetchKeySet(t.Context(), s.id("example.com", "/jwks.json")); err != nil || s.hits.Load() != 2 {
		t.Errorf("second FetchKeySet: %v, %d requests", err, s.hits.Load())
	}
}

// A jwks_uri is fetched under the rules of a metadata document's URL.
func TestFetchKeySetRefuses(t *testing.T) {
	s := newDocServer(t, false, serveBody("application/json", []byte(`{"keys":[]}`)))
	for _, tc := range []struct {
		name    string
		uri     string
		handler http.HandlerFunc
		edit    func(*clientmeta.Options)
		want    string
	}{
		{name: "plain http to a public host", uri: "http://keys.example.net/jwks.json", want: "must be https"},
		{name: "user info", uri: "https://u:p@example.com/jwks.json", want: "user info"},
		{name: "a private address", uri: s.id("private.example", "/jwks.json"), want: "not a public address",
			edit: func(o *clientmeta.Options) {
				o.Resolver = resolver(map[string][]string{"private.example": {"10.1.2.3"}})
			}},
		{name: "the metadata address", uri: s.id("metadata.example", "/jwks.json"), want: "not a public address",
			edit: func(o *clientmeta.Options) {
				o.Resolver = resolver(map[string][]string{"metadata.example": {"169.254.169.254"}})
			}},
		{name: "loopback when not allowed", uri: s.id("example.com", "/jwks.json"), want: "not a public address",
			edit: func(o *clientmeta.Options) { o.AllowLoopbackHTTP = false }},
		{name: "a redirect", uri: s.id("example.com", "/jwks.json"), want: "redirects",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "https://169.254.169.254/latest/meta-data", http.StatusFound)
			}},
		{name: "an error status", uri: s.id("example.com", "/jwks.json"), want: "HTTP 404", handler: http.NotFound},
		{name: "not JSON", uri: s.id("example.com", "/jwks.json"), want: "not served as JSON",
			handler: serveBody("text/html", []byte(`{"keys":[]}`))},
		{name: "too large", uri: s.id("example.com", "/jwks.json"), want: "too large",
			handler: serveBody("application/json", []byte(`{"keys":[],"pad":"`+strings.Repeat("x", 70<<10)+`"}`))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.handler != nil {
				s.set(tc.handler)
				defer s.set(serveBody("application/json", []byte(`{"keys":[]}`)))
			}
			_, _, err := fetcher(t, s, tc.edit).FetchKeySet(t.Context(), tc.uri)
			if err == nil || !strings.Contains(reason(t, err), tc.want) {
				t.Errorf("FetchKeySet = %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}
