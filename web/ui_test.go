package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// versionedRef is a reference of the page to an asset under its build's
// prefix.
var versionedRef = regexp.MustCompile(`="/static/v/[0-9a-f]{12}/`)

// modulePreload is a module the page names for the browser to fetch at
// once (added to index.html when the server starts).
var modulePreload = regexp.MustCompile(`<link rel="modulepreload" href="/static/v/[0-9a-f]{12}/([^"]+)">\n`)

func TestSecurityHeadersEverywhere(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)
	index, err := static.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path        string
		status      int
		contentType string
		page        bool // serves the app's page
	}{
		{path: "/", status: http.StatusOK, contentType: "text/html; charset=utf-8", page: true},
		{path: "/runs/01J0RUN", status: http.StatusOK, contentType: "text/html; charset=utf-8", page: true},
		{path: "/approvals", status: http.StatusOK, contentType: "text/html; charset=utf-8", page: true},
		{path: "/approvals/377FAJJ6LZKVVMG3UOBK3IV6DA", status: http.StatusOK, contentType: "text/html; charset=utf-8", page: true},
		{path: "/review", status: http.StatusOK, contentType: "text/html; charset=utf-8", page: true},
		{path: "/review/policy", status: http.StatusOK, contentType: "text/html; charset=utf-8", page: true},
		{path: "/review/audit/42", status: http.StatusOK, contentType: "text/html; charset=utf-8", page: true},
		{path: "/static/app.css", status: http.StatusOK, contentType: "text/css; charset=utf-8"},
		{path: "/static/js/app.js", status: http.StatusOK, contentType: "text/javascript; charset=utf-8"},
		{path: "/static/js/markdown.js", status: http.StatusOK, contentType: "text/javascript; charset=utf-8"},
		{path: "/static/favicon.svg", status: http.StatusOK, contentType: "image/svg+xml"},
		{path: "/static/nope.js", status: http.StatusNotFound},
		{path: "/static/js/%2e%2e/%2e%2e/doc.go", status: http.StatusNotFound},
		{path: "/static/", status: http.StatusNotFound},
		{path: "/static/js", status: http.StatusNotFound},
		{path: "/auth/session", status: http.StatusOK, contentType: "application/json"},
		{path: "/auth/callback", status: http.StatusBadRequest, contentType: "text/html; charset=utf-8"},
		{path: "/auth/nope", status: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := b.get(e.url + tt.path)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d", r.status, tt.status)
			}
			for name, want := range map[string]string{
				"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
				"X-Frame-Options":         "DENY",
			} {
				if got := r.header.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if tt.contentType != "" && r.header.Get("Content-Type") != tt.contentType {
				t.Errorf("Content-Type %q, want %q", r.header.Get("Content-Type"), tt.contentType)
			}
			if tt.page && versionedRef.ReplaceAllString(modulePreload.ReplaceAllString(r.body, ""), `="/static/`) != string(index) {
				t.Errorf("%s does not serve the app's page", tt.path)
			}
		})
	}
}

func TestAssetsRevalidateByETag(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)
	first := b.get(e.url + "/static/js/app.js")
	etag := first.header.Get("ETag")
	if etag == "" || first.header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, first.header.Get("Cache-Control"))
	}
	again := b.do(http.MethodGet, e.url+"/static/js/app.js", http.Header{"If-None-Match": {etag}}, nil)
	if again.status != http.StatusNotModified || again.header.Get("Content-Security-Policy") == "" {
		t.Fatalf("revalidation: %d, CSP %q", again.status, again.header.Get("Content-Security-Policy"))
	}
}

// TestMountBesideACatchAll mounts the UI on a mux that answers everything
// else itself, as serve's does: no pattern conflicts, and paths that are
// not the UI's stay the mux's.
func TestMountBesideACatchAll(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	mux.Handle("/api/approvals/", http.NotFoundHandler())
	if err := Mount(mux, nil); err != nil {
		t.Fatal(err)
	}
	for path, pattern := range map[string]string{
		"/":                "GET /{$}",
		"/approvals/X":     "GET /approvals/{id}",
		"/static/app.css":  "GET /static/",
		"/auth/login":      "/auth/",
		"/api/approvals/X": "/api/approvals/",
		"/elsewhere":       "/",
		"/runs":            "/",
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://usher.test"+path, nil)
		if _, got := mux.Handler(req); got != pattern {
			t.Errorf("%s is served by %q, want %q", path, got, pattern)
		}
	}
}

// Ways to turn text into markup or code. None may appear in the UI's
// scripts: model, tool and user text only ever becomes text nodes.
var unsafeSinks = regexp.MustCompile(`\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setHTMLUnsafe|createContextualFragment|DOMParser|\.srcdoc|javascript:`)

func TestScriptsHaveNoHTMLSinks(t *testing.T) {
	n := 0
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".js" {
			return err
		}
		if strings.HasPrefix(p, vendorDir+"/") {
			return nil // others' code, unmodified: TestVendoredHighlighter
		}
		n++
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			if m := unsafeSinks.FindString(line); m != "" {
				t.Errorf("%s:%d uses %s", p, i+1, m)
			}
			if strings.Contains(line, "'style'") || strings.Contains(line, `"style"`) {
				t.Errorf("%s:%d sets a style attribute (the CSP forbids inline styles)", p, i+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no scripts embedded")
	}
}

// TestPagePreloadsItsModules: the page names every module its script
// imports, directly or not, as a modulepreload under the build's prefix
// (so that the browser fetches them at once, not one level of imports
// after another), before the script, each once; not the script itself,
// nor what is imported only when needed (the highlighter).
func TestPagePreloadsItsModules(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)
	page := b.get(e.url + "/")
	var got []string
	for _, m := range modulePreload.FindAllStringSubmatch(page.body, -1) {
		got = append(got, m[1])
		if r := b.get(e.url + versionedRef.FindString(m[0])[2:] + m[1]); r.status != http.StatusOK {
			t.Errorf("preloaded %s: %d", m[1], r.status)
		}
	}
	slices.Sort(got)
	want := []string{"js/api.js", "js/approvals.js", "js/apps.js", "js/compaction.js", "js/conversation.js", "js/copy.js", "js/dom.js",
		"js/export.js", "js/highlight.js", "js/json.js", "js/live.js", "js/markdown.js", "js/operator.js", "js/prefs.js", "js/review.js", "js/status.js"}
	// Whatever else app.js comes to import: every script but app.js is
	// imported by it, directly or not (and the vendored highlighter only
	// when needed).
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("the page does not preload %s: %v", w, got)
		}
	}
	if len(slices.Compact(slices.Clone(got))) != len(got) || slices.Contains(got, "js/app.js") || slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "vendor/") }) {
		t.Errorf("the page preloads %v", got)
	}
	if i, j := strings.Index(page.body, `rel="modulepreload"`), strings.Index(page.body, `<script type="module"`); i < 0 || i > j {
		t.Errorf("the preloads are not before the script")
	}
}

// TestScriptsLoadAssetsUnderTheBuild: no script names an asset by an
// absolute /static/ path, which would load it outside the build's prefix
// (revalidated on every use instead of cached for good): a script reaches
// the others relative to itself (import, or new URL(…, import.meta.url)).
func TestScriptsLoadAssetsUnderTheBuild(t *testing.T) {
	absolute := regexp.MustCompile("['\"`]/static/")
	err := fs.WalkDir(static, "static/js", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "//") && absolute.MatchString(line) {
				t.Errorf("%s:%d names an asset by its absolute path: %s", p, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMarkdownRendererIsEmbedded checks for the renderer the conversation
// uses and for its safety rules; browser tests exercise it.
func TestMarkdownRendererIsEmbedded(t *testing.T) {
	b, err := static.ReadFile("static/js/markdown.js")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for _, want := range []string{
		"export function renderMarkdown(",
		"export function safeURL(",
		"u.protocol === 'http:' || u.protocol === 'https:'",
		"a.rel = 'noopener noreferrer'",
		"textContent",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("markdown.js lacks %q", want)
		}
	}
	conv, err := static.ReadFile("static/js/conversation.js")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conv), "import { renderMarkdown } from './markdown.js'") {
		t.Error("the conversation does not render messages with markdown.js")
	}
}

// TestPageHasNoInlineCode checks the page against its own CSP: no inline
// script, style or event handler, and every module import resolves to an
// embedded file.
func TestPageHasNoInlineCode(t *testing.T) {
	files, err := loadAssets()
	if err != nil {
		t.Fatal(err)
	}
	inline := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]|<style|\sstyle=|\son[a-z]+=|javascript:`)
	for name, f := range files {
		if path.Ext(name) == ".html" || path.Ext(name) == ".svg" {
			if m := inline.FindString(string(f.body)); m != "" {
				t.Errorf("%s has inline code or style: %q", name, m)
			}
		}
	}
	ref := regexp.MustCompile(`(?:src|href)="(/static/[^"]+)"`)
	for _, m := range ref.FindAllStringSubmatch(string(files["index.html"].body), -1) {
		if _, ok := files[strings.TrimPrefix(m[1], "/static/")]; !ok {
			t.Errorf("index.html refers to %s, which is not embedded", m[1])
		}
	}
	imp := regexp.MustCompile(`(?m)^import .* from '(\./[^']+)';$`)
	for name, f := range files {
		if path.Ext(name) != ".js" {
			continue
		}
		for _, m := range imp.FindAllStringSubmatch(string(f.body), -1) {
			target := path.Join(path.Dir(name), m[1])
			if _, ok := files[target]; !ok {
				t.Errorf("%s imports %s, which is not embedded", name, m[1])
			}
		}
	}
}

// TestAssetsGzipped: text assets go gzipped to a client that accepts gzip
// (and as they are to one that does not), each form with its own ETag,
// both varying by Accept-Encoding.
func TestAssetsGzipped(t *testing.T) {
	e := newEnv(t)
	get := func(accept string, header ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.url+"/static/js/conversation.js", nil)
		req.Header.Set("Accept-Encoding", accept) // set: the transport leaves the body as sent
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	plain, body := get("identity")
	want, err := static.ReadFile("static/js/conversation.js")
	if err != nil {
		t.Fatal(err)
	}
	if plain.Header.Get("Content-Encoding") != "" || !bytes.Equal(body, want) || plain.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("identity: encoding %q, %d bytes, Vary %q", plain.Header.Get("Content-Encoding"), len(body), plain.Header.Get("Vary"))
	}
	for _, accept := range []string{"gzip", "br, gzip;q=0.5", "deflate, *"} {
		gz, zipped := get(accept)
		zr, err := gzip.NewReader(bytes.NewReader(zipped))
		if err != nil {
			t.Fatalf("%s: %v", accept, err)
		}
		unzipped, _ := io.ReadAll(zr)
		if gz.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(unzipped, want) || len(zipped) >= len(want)*9/10 ||
			gz.Header.Get("ETag") == plain.Header.Get("ETag") || gz.Header.Get("Vary") != "Accept-Encoding" {
			t.Errorf("%s: encoding %q, %d bytes for %d, ETag %q", accept, gz.Header.Get("Content-Encoding"), len(zipped), len(want), gz.Header.Get("ETag"))
		}
		if again, _ := get(accept, "If-None-Match", gz.Header.Get("ETag")); again.StatusCode != http.StatusNotModified {
			t.Errorf("%s: revalidating the gzipped form = %d", accept, again.StatusCode)
		}
	}
	for _, accept := range []string{"gzip;q=0", "gzip;q=0, *", "br", ""} {
		if r, _ := get(accept); r.Header.Get("Content-Encoding") != "" {
			t.Errorf("Accept-Encoding %q got %q", accept, r.Header.Get("Content-Encoding"))
		}
	}
}

// TestAssetsUnderTheBuild: the page loads its assets under its build's
// prefix, which is cached for good (another build has another prefix);
// the same files under another build's prefix, or none, are revalidated.
func TestAssetsUnderTheBuild(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)
	page := b.get(e.url + "/")
	refs := regexp.MustCompile(`(?:src|href)="(/static/v/([0-9a-f]{12})/[^"]+)"`).FindAllStringSubmatch(page.body, -1)
	if len(refs) < 3 || page.header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("the page (%s) references %v", page.header.Get("Cache-Control"), refs)
	}
	build := refs[0][2]
	for _, ref := range refs {
		if ref[2] != build {
			t.Errorf("%s is under another build than %s", ref[1], build)
		}
		r := b.get(e.url + ref[1])
		if r.status != http.StatusOK || r.header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
			t.Errorf("%s: %d, Cache-Control %q", ref[1], r.status, r.header.Get("Cache-Control"))
		}
	}
	// A module's relative import stays under the prefix, and so does the
	// vendored highlighter, which highlight.js imports beside itself.
	for _, p := range []string{"js/dom.js", "vendor/highlight/core.min.js", "vendor/highlight/languages/go.min.js"} {
		if r := b.get(e.url + "/static/v/" + build + "/" + p); r.status != http.StatusOK || r.header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
			t.Errorf("%s under the build: %d %q", p, r.status, r.header.Get("Cache-Control"))
		}
	}
	for _, p := range []string{"/static/v/000000000000/js/app.js", "/static/js/app.js"} {
		if r := b.get(e.url + p); r.status != http.StatusOK || r.header.Get("Cache-Control") != "no-cache" {
			t.Errorf("%s: %d, Cache-Control %q, want it served and revalidated", p, r.status, r.header.Get("Cache-Control"))
		}
	}
	for _, p := range []string{"/static/v/" + build + "/nope.js", "/static/v/" + build + "/", "/static/v/" + build + "/js/%2e%2e/%2e%2e/doc.go"} {
		if r := b.get(e.url + p); r.status != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, r.status)
		}
	}
}
