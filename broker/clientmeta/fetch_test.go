package clientmeta_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/clientmeta"
)

func TestFetchReturnsTheValidatedDocument(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/oauth/client.json")
	body, _ := json.Marshal(document(id, func(d map[string]any) {
		delete(d, "grant_types")
		delete(d, "response_types")
		delete(d, "token_endpoint_auth_method")
		d["scope"] = "mcp:invoke"
		d["software_id"] = "kept in Raw, otherwise ignored"
	}))
	s.set(serveBody("application/json; charset=utf-8", body))
	f := fetcher(t, s, nil)

	doc, err := f.Fetch(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if doc.ClientID != id || doc.ClientName != "Example MCP Client" || doc.ClientURI != "https://app.example.com" ||
		doc.LogoURI != "https://app.example.com/logo.png" || doc.Scope != "mcp:invoke" {
		t.Errorf("document = %+v", doc)
	}
	if got := doc.GrantTypes; len(got) != 1 || got[0] != "authorization_code" {
		t.Errorf("default grant_types = %q", got)
	}
	if got := doc.ResponseTypes; len(got) != 1 || got[0] != "code" {
		t.Errorf("default response_types = %q", got)
	}
	if doc.TokenEndpointAuthMethod != "none" {
		t.Errorf("default token_endpoint_auth_method = %q", doc.TokenEndpointAuthMethod)
	}
	if string(doc.Raw) != string(body) {
		t.Errorf("Raw = %s, want the body byte for byte", doc.Raw)
	}
	for uri, want := range map[string]bool{
		"http://127.0.0.1:3000/callback":      true,
		"http://localhost:3000/callback":      true,
		"http://127.0.0.1:3000/callback/":     false,
		"http://127.0.0.1:3000/Callback":      false,
		"HTTP://127.0.0.1:3000/callback":      false,
		"http://127.0.0.1:3001/callback":      false,
		"http://127.0.0.1:3000/callback?x=1":  false,
		"http://127.0.0.1:3000/callback#frag": false,
		"":                                    false,
	} {
		if got := doc.RedirectURIAllowed(uri); got != want {
			t.Errorf("RedirectURIAllowed(%q) = %v, want %v", uri, got, want)
		}
	}

	// The document is the caller's copy: changing it changes no cache.
	doc.RedirectURIs[0] = "https://evil.example/cb"
	doc.Raw[0] = 'x'
	again, err := f.Fetch(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if again.RedirectURIs[0] != "http://127.0.0.1:3000/callback" || again.Raw[0] != '{' {
		t.Errorf("the cached document changed with the caller's copy: %+v", again)
	}
	if n := s.hits.Load(); n != 1 {
		t.Errorf("%d requests, want 1 (the second from the cache)", n)
	}
}

func TestFetchAcceptsPrivateKeyJWTAndJSONSubtypes(t *testing.T) {
	s := newDocServer(t, false, nil)
	cases := map[string]func(map[string]any){
		"jwks_uri": func(d map[string]any) {
			d["token_endpoint_auth_method"] = "private_key_jwt"
			d["jwks_uri"] = "https://app.example.com/jwks.json"
		},
		"jwks": func(d map[string]any) {
			d["token_endpoint_auth_method"] = "private_key_jwt"
			d["jwks"] = map[string]any{"keys": []any{map[string]any{"kty": "EC", "crv": "P-256", "x": "x", "y": "y"}}}
		},
		"private-use redirect": func(d map[string]any) {
			d["redirect_uris"] = []string{"com.example.app:/oauth/cb", "https://app.example.com/cb"}
		},
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			id := s.id("example.com", "/"+strings.ReplaceAll(name, " ", "-")+".json")
			s.set(serveJSON(document(id, edit)))
			f := fetcher(t, s, nil)
			if _, err := f.Fetch(t.Context(), id); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("application/oauth-client+json", func(t *testing.T) {
		id := s.id("example.com", "/subtype.json")
		body, _ := json.Marshal(document(id, nil))
		s.set(serveBody("application/oauth-client+json", body))
		if _, err := fetcher(t, s, nil).Fetch(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCheckClientIDRefusesBadURLForms(t *testing.T) {
	f := fetcher(t, nil, nil)
	strict := fetcher(t, nil, func(o *clientmeta.Options) { o.AllowLoopbackHTTP = false })
	good := []string{
		"https://app.example.com/client.json",
		"https://app.example.com:8443/oauth/client-metadata.json",
		"https://app.example.com/",
		"https://app.example.com/client?version=2",
		"https://app.example.com/a.b/..c/c..",
	}
	for _, id := range good {
		if err := strict.CheckClientID(id); err != nil {
			t.Errorf("CheckClientID(%q) = %v, want nil", id, err)
		}
	}
	bad := map[string]string{
		"":                                          "the client_id is empty",
		"my-client":                                 "the client_id is not an absolute URL with a host",
		"https:client.json":                         "the client_id is not an absolute URL with a host",
		"https:///client.json":                      "the client_id is not an absolute URL with a host",
		"https://app.example.com":                   "the client_id URL must have a path",
		"https://app.example.com?x=1":               "the client_id URL must have a path",
		"https://app.example.com/client.json#x":     "the client_id URL must not have a fragment",
		"https://app.example.com/client.json#":      "the client_id URL must not have a fragment",
		"https://user@app.example.com/client.json":  "the client_id URL must not have user info",
		"https://u:p@app.example.com/client.json":   "the client_id URL must not have user info",
		"https://app.example.com/./client.json":     "the client_id URL must not have dot segments",
		"https://app.example.com/a/../client.json":  "the client_id URL must not have dot segments",
		"https://app.example.com/a/..":              "the client_id URL must not have dot segments",
		"https://app.example.com/%2e%2E/client":     "the client_id URL must not have dot segments",
		"https://app.example.com/a/%2e/client":      "the client_id URL must not have dot segments",
		"http://app.example.com/client.json":        "the client_id URL must be https",
		"ftp://app.example.com/client.json":         "the client_id URL must be https",
		"https://app.example.com/client json":       "the client_id URL has a character a URL cannot hold",
		"https://app.example.com/client\x00":        "the client_id URL has a character a URL cannot hold",
		"https://app.example.com/clíent":            "the client_id URL has a character a URL cannot hold",
		"https://app.example.com/" + longPath(3000): "the client_id URL is too long",
		"https://[::1/client.json":                  "the client_id is not a URL",
	}
	for id, want := range bad {
		if got := reason(t, strict.CheckClientID(id)); got != want {
			t.Errorf("CheckClientID(%q) = %q, want %q", id, got, want)
		}
	}
	// Plain http: only with AllowLoopbackHTTP, and only to a loopback host.
	for id, want := range map[string]string{
		"http://127.0.0.1:3000/client.json":   "",
		"http://[::1]:3000/client.json":       "",
		"http://localhost:3000/client.json":   "",
		"http://app.example.com/client.json":  "the client_id URL must be https (http only to a loopback host)",
		"http://10.0.0.1/client.json":         "the client_id URL must be https (http only to a loopback host)",
		"http://localhost.evil.com/client.js": "the client_id URL must be https (http only to a loopback host)",
	} {
		err := f.CheckClientID(id)
		switch {
		case want == "" && err != nil:
			t.Errorf("with AllowLoopbackHTTP, CheckClientID(%q) = %v", id, err)
		case want != "" && reason(t, err) != want:
			t.Errorf("with AllowLoopbackHTTP, CheckClientID(%q) = %v, want %q", id, err, want)
		}
		if strict.CheckClientID(id) == nil {
			t.Errorf("without AllowLoopbackHTTP, CheckClientID(%q) accepted", id)
		}
	}
	// Fetch applies the same checks, before any request.
	if _, err := strict.Fetch(t.Context(), "https://app.example.com/a/../b"); reason(t, err) != "the client_id URL must not have dot segments" {
		t.Errorf("Fetch of a dot-segment URL: %v", err)
	}
}

func longPath(n int) string { return strings.Repeat("a", n) }

func TestFetchRefusesBadDocuments(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	with := func(edit func(map[string]any)) http.HandlerFunc { return serveJSON(document(id, edit)) }
	valid, _ := json.Marshal(document(id, nil))
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"client_id of another URL", with(func(d map[string]any) { d["client_id"] = s.id("example.com", "/other.json") }),
			"the client metadata document's client_id is not its URL"},
		{"client_id with a trailing slash", with(func(d map[string]any) { d["client_id"] = id + "/" }),
			"the client metadata document's client_id is not its URL"},
		{"client_id in another case", with(func(d map[string]any) { d["client_id"] = strings.Replace(id, "example", "EXAMPLE", 1) }),
			"the client metadata document's client_id is not its URL"},
		{"no client_id", with(func(d map[string]any) { delete(d, "client_id") }),
			"the client metadata document's client_id is not its URL"},
		{"missing redirect_uris", with(func(d map[string]any) { delete(d, "redirect_uris") }),
			"the client metadata document has no redirect_uris"},
		{"empty redirect_uris", with(func(d map[string]any) { d["redirect_uris"] = []string{} }),
			"the client metadata document has no redirect_uris"},
		{"javascript: redirect_uri", with(func(d map[string]any) { d["redirect_uris"] = []string{"javascript:alert(1)"} }),
			"the client metadata document has a redirect_uri that is not acceptable"},
		{"data: redirect_uri", with(func(d map[string]any) { d["redirect_uris"] = []string{"data:text/html,hi"} }),
			"the client metadata document has a redirect_uri that is not acceptable"},
		{"http redirect_uri to a remote host", with(func(d map[string]any) { d["redirect_uris"] = []string{"http://app.example.com/cb"} }),
			"the client metadata document has a redirect_uri that is not acceptable"},
		{"redirect_uri with a fragment", with(func(d map[string]any) { d["redirect_uris"] = []string{"https://app.example.com/cb#x"} }),
			"the client metadata document has a redirect_uri that is not acceptable"},
		{"relative redirect_uri", with(func(d map[string]any) { d["redirect_uris"] = []string{"/cb"} }),
			"the client metadata document has a redirect_uri that is not acceptable"},
		{"redirect_uris not a list", with(func(d map[string]any) { d["redirect_uris"] = "https://app.example.com/cb" }),
			"the client metadata document is not valid JSON of client metadata"},
		{"too many redirect_uris", with(func(d map[string]any) { d["redirect_uris"] = manyURIs(33) }),
			"the client metadata document has too many redirect_uris"},
		{"missing client_name", with(func(d map[string]any) { delete(d, "client_name") }),
			"the client metadata document has no client_name"},
		{"blank client_name", with(func(d map[string]any) { d["client_name"] = "  " }),
			"the client metadata document has no client_name"},
		{"client_name with an RTL override", with(func(d map[string]any) { d["client_name"] = "Good\u202eApp" }),
			"the client metadata document's client_name has control characters"},
		{"client_name with a newline", with(func(d map[string]any) { d["client_name"] = "Good\nApp" }),
			"the client metadata document's client_name has control characters"},
		{"very long client_name", with(func(d map[string]any) { d["client_name"] = strings.Repeat("n", 201) }),
			"the client metadata document's client_name is too long"},
		{"client_secret_basic", with(func(d map[string]any) { d["token_endpoint_auth_method"] = "client_secret_basic" }),
			"a client metadata document cannot use a client secret"},
		{"client_secret_post", with(func(d map[string]any) { d["token_endpoint_auth_method"] = "client_secret_post" }),
			"a client metadata document cannot use a client secret"},
		{"client_secret_jwt", with(func(d map[string]any) { d["token_endpoint_auth_method"] = "client_secret_jwt" }),
			"a client metadata document cannot use a client secret"},
		{"a client_secret member", with(func(d map[string]any) { d["client_secret"] = "s3cret" }),
			"a client metadata document cannot hold a client secret"},
		{"unknown auth method", with(func(d map[string]any) { d["token_endpoint_auth_method"] = "tls_client_auth" }),
			"the client metadata document names an unsupported token_endpoint_auth_method"},
		{"private_key_jwt without keys", with(func(d map[string]any) { d["token_endpoint_auth_method"] = "private_key_jwt" }),
			"private_key_jwt needs jwks_uri or jwks in the client metadata document"},
		{"jwks_uri and jwks", with(func(d map[string]any) {
			d["jwks_uri"] = "https://app.example.com/jwks"
			d["jwks"] = map[string]any{"keys": []any{map[string]any{"kty": "EC"}}}
		}), "the client metadata document has both jwks_uri and jwks"},
		{"http jwks_uri", with(func(d map[string]any) { d["jwks_uri"] = "http://app.example.com/jwks" }),
			"the client metadata document's jwks_uri is not an https URL"},
		{"jwks without keys", with(func(d map[string]any) { d["jwks"] = map[string]any{"keys": []any{}} }),
			"the client metadata document's jwks is not a key set"},
		{"javascript: logo_uri", with(func(d map[string]any) { d["logo_uri"] = "javascript:alert(1)" }),
			"the client metadata document's logo_uri is not an http(s) URL"},
		{"data: client_uri", with(func(d map[string]any) { d["client_uri"] = "data:text/html,hi" }),
			"the client metadata document's client_uri is not an http(s) URL"},
		{"password grant", with(func(d map[string]any) { d["grant_types"] = []string{"authorization_code", "password"} }),
			"the client metadata document names an unsupported grant type"},
		{"token response type", with(func(d map[string]any) { d["response_types"] = []string{"code", "token"} }),
			"the client metadata document names an unsupported response type"},
		{"bad scope", with(func(d map[string]any) { d["scope"] = "a  b" }),
			"the client metadata document's scope is not a list of scope tokens"},
		{"not JSON", serveBody("application/json", []byte("<html>hello</html>")),
			"the client metadata document is not a JSON object"},
		{"a JSON array", serveBody("application/json", []byte(`[{"client_id":"x"}]`)),
			"the client metadata document is not a JSON object"},
		{"trailing data", serveBody("application/json", append(valid[:len(valid):len(valid)], []byte(" {}")...)),
			"the client metadata document is not valid JSON of client metadata"},
		{"nested too deep", with(func(d map[string]any) {
			var v any = "x"
			for range clientmeta.MaxDepth {
				v = []any{v}
			}
			d["extra"] = v
		}), "the client metadata document nests objects and arrays too deep"},
		{"not UTF-8", serveBody("application/json", []byte("{\"client_name\":\"\xff\"}")),
			"the client metadata document is not UTF-8"},
		{"a member twice", serveBody("application/json", []byte(`{"client_id":"`+id+`","client_name":"A","redirect_uris":["https://a.example/cb"],"redirect_uris":["https://b.example/cb"]}`)),
			"the client metadata document is not valid JSON of client metadata"},
		{"a member name in another case", serveBody("application/json", []byte(`{"client_id":"`+id+`","client_name":"A","Redirect_URIs":["https://a.example/cb"]}`)),
			"the client metadata document has no redirect_uris"},
		{"a client_secret member of null", with(func(d map[string]any) { d["client_secret"] = nil }),
			"a client metadata document cannot hold a client secret"},
		{"text/html", serveBody("text/html", valid),
			"the client metadata document is not served as application/json"},
		{"text/plain", serveBody("text/plain; charset=utf-8", valid),
			"the client metadata document is not served as application/json"},
		{"application/jsonp", serveBody("application/jsonp", valid),
			"the client metadata document is not served as application/json"},
		{"application/+json", serveBody("application/+json", valid),
			"the client metadata document is not served as application/json"},
		{"a malformed content type", serveBody("application/json; =x", valid),
			"the client metadata document is not served as application/json"},
		{"scope too long", with(func(d map[string]any) { d["scope"] = strings.Repeat("s", 1025) }),
			"the client metadata document's scope is too long"},
		{"scope with a quote", with(func(d map[string]any) { d["scope"] = `mcp:invoke "x"` }),
			"the client metadata document's scope is not a list of scope tokens"},
		{"logo_uri with user info", with(func(d map[string]any) { d["logo_uri"] = "https://u@app.example.com/logo.png" }),
			"the client metadata document's logo_uri is not an http(s) URL"},
		{"no content type", serveBody("", valid, "X-Content-Type-Options", "nosniff"),
			"the client metadata document is not served as application/json"},
		{"404", func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) },
			"the client metadata document URL answered HTTP 404"},
		{"500", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) },
			"the client metadata document URL answered HTTP 500"},
		{"204", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) },
			"the client metadata document URL answered HTTP 204"},
		{"oversized, declared", serveBody("application/json", oversized(id, 64<<10+1)),
			"the client metadata document is too large"},
		{"oversized, chunked", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			body := oversized(id, 64<<10+1)
			w.Write(body[:1000])
			w.(http.Flusher).Flush() // no Content-Length: the limit must be found while reading
			w.Write(body[1000:])
		}, "the client metadata document is too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.set(c.handler)
			_, err := fetcher(t, s, nil).Fetch(t.Context(), id)
			if got := reason(t, err); got != c.want {
				t.Errorf("reason = %q, want %q (error %v)", got, c.want, err)
			}
		})
	}
}

// manyURIs returns n distinct acceptable redirect URIs.
func manyURIs(n int) []string {
	var out []string
	for i := range n {
		out = append(out, "https://app.example.com/cb/"+strings.Repeat("x", i))
	}
	return out
}

// oversized returns a valid document of clientID padded to size bytes.
func oversized(clientID string, size int) []byte {
	d := document(clientID, nil)
	base, _ := json.Marshal(d)
	d["padding"] = strings.Repeat("p", size-len(base)-len(`,"padding":""`))
	body, _ := json.Marshal(d)
	return body
}

func TestFetchAcceptsADocumentOfExactlyTheLimit(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	body := oversized(id, 64<<10)
	if len(body) != 64<<10 {
		t.Fatalf("body of %d bytes", len(body))
	}
	s.set(serveBody("application/json", body))
	if _, err := fetcher(t, s, nil).Fetch(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	f := fetcher(t, s, func(o *clientmeta.Options) { o.MaxBodyBytes = 64<<10 - 1 })
	if _, err := f.Fetch(t.Context(), id); reason(t, err) != "the client metadata document is too large" {
		t.Errorf("one byte over MaxBodyBytes: %v", err)
	}
}

func TestFetchRefusesRedirects(t *testing.T) {
	s := newDocServer(t, false, nil)
	target := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	targetID := target.id("example.com", "/client.json")
	target.set(serveJSON(document(id, nil)))
	cases := map[string]http.HandlerFunc{
		"a redirect to the same host": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/client.json" {
				http.Redirect(w, r, "/moved.json", http.StatusFound)
				return
			}
			serveJSON(document(id, nil))(w, r)
		},
		"a chain of redirects": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, r.URL.Path+"x", http.StatusMovedPermanently)
		},
		"a redirect to another server": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, targetID, http.StatusTemporaryRedirect)
		},
		"a redirect to the metadata address": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusPermanentRedirect)
		},
		"a redirect to a private address": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://10.0.0.1/client.json", http.StatusSeeOther)
		},
		"a 304 to a request that revalidates nothing": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotModified)
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			s.set(h)
			before := s.hits.Load()
			_, err := fetcher(t, s, nil).Fetch(t.Context(), id)
			want := "the client metadata document URL redirects, and redirects are not followed"
			if name == "a 304 to a request that revalidates nothing" {
				want = "the client metadata document URL answered HTTP 304"
			}
			if got := reason(t, err); got != want {
				t.Errorf("reason = %q, want %q", got, want)
			}
			if n := s.hits.Load() - before; n != 1 {
				t.Errorf("%d requests to the first server, want 1", n)
			}
		})
	}
	if n := target.hits.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}

func TestFetchRefusesForbiddenAddresses(t *testing.T) {
	s := newDocServer(t, false, nil)
	plain := newDocServer(t, true, nil)
	s.set(serveJSON(document(s.id("evil.example", "/client.json"), nil)))
	cases := []struct {
		name      string
		addrs     []string
		id        string
		allowHTTP bool
		want      string
	}{
		{"loopback, not allowed", []string{"127.0.0.1"}, "", false, "the client_id's host is not a public address"},
		{"other loopback address", []string{"127.0.0.2"}, "", false, "the client_id's host is not a public address"},
		{"IPv6 loopback", []string{"::1"}, "", false, "the client_id's host is not a public address"},
		{"IPv4-mapped loopback", []string{"::ffff:127.0.0.1"}, "", false, "the client_id's host is not a public address"},
		{"cloud metadata address", []string{"169.254.169.254"}, "", true, "the client_id's host is not a public address"},
		{"10/8", []string{"10.0.0.1"}, "", true, "the client_id's host is not a public address"},
		{"172.16/12", []string{"172.31.255.1"}, "", true, "the client_id's host is not a public address"},
		{"192.168/16", []string{"192.168.1.1"}, "", true, "the client_id's host is not a public address"},
		{"CGNAT", []string{"100.64.0.1"}, "", true, "the client_id's host is not a public address"},
		{"IPv4-mapped private", []string{"::ffff:10.0.0.1"}, "", true, "the client_id's host is not a public address"},
		{"IPv4-mapped metadata", []string{"::ffff:169.254.169.254"}, "", true, "the client_id's host is not a public address"},
		{"NAT64 of a private address", []string{"64:ff9b::a00:1"}, "", true, "the client_id's host is not a public address"},
		{"unique local IPv6", []string{"fd00::1"}, "", true, "the client_id's host is not a public address"},
		{"link-local IPv6", []string{"fe80::1"}, "", true, "the client_id's host is not a public address"},
		{"unspecified", []string{"0.0.0.0"}, "", true, "the client_id's host is not a public address"},
		{"multicast", []string{"224.0.0.1"}, "", true, "the client_id's host is not a public address"},
		{"every address forbidden", []string{"10.0.0.1", "169.254.169.254", "fd00::1"}, "", true, "the client_id's host is not a public address"},
		{"a name that does not resolve", nil, "", true, "the client_id's host name could not be resolved"},
		{"an IP literal of the metadata address", nil, "https://169.254.169.254/latest/meta-data/", true, "the client_id's host is not a public address"},
		{"an IP literal on loopback, not allowed", nil, s.id("127.0.0.1", "/client.json"), false, "the client_id's host is not a public address"},
		{"plain http to localhost resolving to a private address", []string{"10.0.0.1"}, plain.id("localhost", "/client.json"), true, "the client_id's host is not a public address"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fetcher(t, s, func(o *clientmeta.Options) {
				o.AllowLoopbackHTTP = c.allowHTTP
				o.Resolver = resolver(map[string][]string{"evil.example": c.addrs, "localhost": c.addrs})
			})
			id := c.id
			if id == "" {
				id = s.id("evil.example", "/client.json")
			}
			before, beforePlain := s.hits.Load(), plain.hits.Load()
			_, err := f.Fetch(t.Context(), id)
			if got := reason(t, err); got != c.want {
				t.Fatalf("reason = %q, want %q (error %v)", got, c.want, err)
			}
			if s.hits.Load() != before || plain.hits.Load() != beforePlain {
				t.Error("a request reached the server")
			}
			// The client is told the reason only; the address is for logs.
			var e *clientmeta.Error
			errors.As(err, &e)
			for _, a := range c.addrs {
				if strings.Contains(err.Error(), a) {
					t.Errorf("error text %q names the address %s", err, a)
				}
			}
			if c.want == "the client_id's host is not a public address" && e.Cause == nil {
				t.Error("no Cause for the logs")
			}
		})
	}
}

func TestFetchDialsOnlyTheAllowedAddressesOfAName(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	s.set(serveJSON(document(id, nil)))
	f := fetcher(t, s, func(o *clientmeta.Options) {
		o.Resolver = resolver(map[string][]string{"example.com": {"169.254.169.254", "10.0.0.1", "127.0.0.1"}})
	})
	if _, err := f.Fetch(t.Context(), id); err != nil {
		t.Fatalf("the loopback address (allowed) was not dialled: %v", err)
	}
}

func TestFetchReportsTheDialFailureOfAnAllowedAddress(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	s.Close() // nothing listens on its port any more
	f := fetcher(t, s, func(o *clientmeta.Options) {
		o.Resolver = resolver(map[string][]string{"example.com": {"10.0.0.1", "127.0.0.1"}})
	})
	_, err := f.Fetch(t.Context(), id)
	if got := reason(t, err); got != "the client metadata document could not be fetched" {
		t.Errorf("reason = %q", got)
	}
}

func TestFetchOverLoopbackHTTP(t *testing.T) {
	s := newDocServer(t, true, nil)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		id := s.id(host, "/client.json")
		s.set(serveJSON(document(id, nil)))
		if _, err := fetcher(t, s, nil).Fetch(t.Context(), id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		strict := fetcher(t, s, func(o *clientmeta.Options) { o.AllowLoopbackHTTP = false })
		if _, err := strict.Fetch(t.Context(), id); reason(t, err) != "the client_id URL must be https" {
			t.Errorf("%s without AllowLoopbackHTTP: %v", id, err)
		}
	}
}

func TestFetchRefusesAnUntrustedCertificate(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	s.set(serveJSON(document(id, nil)))
	f := fetcher(t, s, func(o *clientmeta.Options) { o.RootCAs = nil })
	_, err := f.Fetch(t.Context(), id)
	if got := reason(t, err); got != "the client metadata document could not be fetched" {
		t.Errorf("reason = %q", got)
	}
	if s.hits.Load() != 0 {
		t.Error("the request was sent over an unverified connection")
	}
}

func TestFetchTimeLimit(t *testing.T) {
	const limit = 300 * time.Millisecond
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	body, _ := json.Marshal(document(id, nil))
	cases := map[string]http.HandlerFunc{
		"slow headers": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			// Never an answer, not even the empty one a returning
			// handler would send once the client has given up.
			panic(http.ErrAbortHandler)
		},
		"slow body": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			for _, b := range body {
				w.Write([]byte{b})
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			s.set(h)
			f := fetcher(t, s, func(o *clientmeta.Options) { o.Timeout = limit })
			start := time.Now()
			_, err := f.Fetch(t.Context(), id)
			elapsed := time.Since(start)
			if got := reason(t, err); got != "fetching the client metadata document timed out" {
				var e *clientmeta.Error
				errors.As(err, &e)
				t.Errorf("reason = %q (cause %v)", got, e.Cause)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v is not a context.DeadlineExceeded", err)
			}
			if elapsed > limit+time.Second {
				t.Errorf("took %v, the limit is %v", elapsed, limit)
			}
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for name, o := range map[string]clientmeta.Options{
		"negative timeout":     {Timeout: -1},
		"negative body limit":  {MaxBodyBytes: -1},
		"MinTTL beyond MaxTTL": {MinTTL: 2 * time.Hour, MaxTTL: time.Hour},
		"negative MinTTL":      {MinTTL: -time.Second},
		"negative MaxTTL":      {MaxTTL: -time.Second},
	} {
		if _, err := clientmeta.New(&o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
	if _, err := clientmeta.New(nil); err != nil {
		t.Errorf("New(nil) = %v", err)
	}
}

func TestFetchAcceptsADocumentNestedToTheLimit(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	var v any = "x"
	for range clientmeta.MaxDepth - 1 { // the document's own object is the first level
		v = []any{v}
	}
	s.set(serveJSON(document(id, func(d map[string]any) { d["extra"] = v })))
	if _, err := fetcher(t, s, nil).Fetch(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}
