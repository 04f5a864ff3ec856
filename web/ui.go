package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usherhq/usher/internal/httpx"
)

// static holds the Sessions UI: hand-written HTML, CSS and JavaScript
// modules, served as they are — no build step, no Node at run time.
//
//go:embed static
var static embed.FS

// ContentSecurityPolicy is sent with every page, asset and sign-in answer:
// scripts and styles only from this origin's files (never inline), no
// framing, no plugins, no base or form redirection elsewhere.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// withSecurityHeaders sets the UI's security headers on every answer of
// next.
func withSecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// contentTypes are the only kinds of file served; anything else is 404.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
}

// asset is one embedded file, ready to serve: as it is, and gzipped when
// that makes it smaller by a tenth or more.
type asset struct {
	body        []byte
	contentType string
	etag        string
	gzipped     []byte // nil: served as it is only
	gzipETag    string
}

// assets are the embedded files by their path under static/.
type assets map[string]asset

func loadAssets() (assets, error) {
	out := assets{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return nil
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		a, err := newAsset(b, ct)
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(p, "static/")] = a
		return nil
	})
	return out, err
}

// newAsset is the asset of body b, of type ct.
func newAsset(b []byte, ct string) (asset, error) {
	sum := sha256.Sum256(b)
	a := asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
	gz, err := gzipped(b)
	if err != nil {
		return asset{}, err
	}
	if len(gz) <= len(b)*9/10 {
		a.gzipped, a.gzipETag = gz, `"`+hex.EncodeToString(sum[:12])+`-gzip"`
	}
	return a, nil
}

// build names this binary's assets: a hash of all of them. The page loads
// them under /static/v/BUILD/, which may be cached for good, since another
// build has another prefix; a module's relative imports stay under it.
func (a assets) build() string {
	names := make([]string, 0, len(a))
	for n := range a {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s %s\n", n, a[n].etag)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// versionPage makes the page load its assets under /static/v/build/,
// and name every module its script imports, directly or not, as a
// modulepreload: the browser then fetches them all at once, instead of
// one level of imports after another.
func (a assets) versionPage(build string) error {
	page := a["index.html"]
	var links bytes.Buffer
	for _, m := range a.imports("js/app.js") {
		fmt.Fprintf(&links, "<link rel=\"modulepreload\" href=\"/static/%s\">\n", m)
	}
	b := bytes.Replace(page.body, []byte(`<script type="module"`), append(links.Bytes(), `<script type="module"`...), 1)
	b = bytes.ReplaceAll(b, []byte(`="/static/`), []byte(`="/static/v/`+build+`/`))
	v, err := newAsset(b, page.contentType)
	if err != nil {
		return err
	}
	a["index.html"] = v
	return nil
}

// staticImport is a module's static import of another beside it or below
// (import … from './x.js'); a dynamic import(…) is loaded when needed and
// is not one.
var staticImport = regexp.MustCompile(`(?m)^import\s[^;'"]*?\bfrom\s*'\./([\w./-]+\.js)'`)

// imports is what the module root (a path under static/) imports, directly
// or not, in the order first met, root excluded.
func (a assets) imports(root string) []string {
	seen := map[string]bool{root: true}
	var out []string
	var walk func(m string)
	walk = func(m string) {
		for _, sub := range staticImport.FindAllSubmatch(a[m].body, -1) {
			p := path.Join(path.Dir(m), string(sub[1]))
			if _, ok := a[p]; !ok || seen[p] {
				continue
			}
			seen[p] = true
			out = append(out, p)
			walk(p)
		}
	}
	walk(root)
	return out
}

// The cache policies of the assets: revalidated every time (cheap, by
// ETag), so that a new binary's assets are used at once, never mixed with
// an old page's; or, under this build's prefix, kept for good.
const (
	revalidate = "no-cache"
	immutable  = "public, max-age=31536000, immutable"
)

func (a assets) serve(w http.ResponseWriter, r *http.Request, name, cache string) {
	f, ok := a[name]
	if !ok {
		httpx.WriteError(w, r, nil, httpx.ErrNotFound)
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.contentType)
	h.Set("Cache-Control", cache)
	body, etag := f.body, f.etag
	if f.gzipped != nil {
		h.Add("Vary", "Accept-Encoding")
		if acceptsGzip(r.Header.Values("Accept-Encoding")) {
			body, etag = f.gzipped, f.gzipETag
			h.Set("Content-Encoding", "gzip")
		}
	}
	h.Set("ETag", etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
}

// gzipped is b compressed with gzip at the best compression: done once,
// when the assets are loaded.
func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// acceptsGzip reports whether Accept-Encoding values accept gzip: gzip
// (or x-gzip) with a q above 0, or, when neither is named, * with a q
// above 0.
func acceptsGzip(values []string) bool {
	gzipQ, starQ := -1.0, -1.0
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				if k, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
						q = f
					}
				}
			}
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				gzipQ = max(gzipQ, q)
			case "*":
				starQ = max(starQ, q)
			}
		}
	}
	return gzipQ > 0 || (gzipQ < 0 && starQ > 0)
}

// UI returns the handler of the Sessions UI. It serves the page at the
// paths of the UI — "/", "/runs/{id}", "/approvals", "/approvals/{id}"
// (the link an approval-required MCP result carries), "/apps" (the
// connected apps), "/operator" (the status, for admins) and the
// reviewers' "/review", "/review/{section}" and "/review/audit/{seq}" —
// and the assets at
// "/static/…"; anything else is 404. Every answer carries the security
// headers (ContentSecurityPolicy, nosniff, no-referrer, no framing).
func UI() (http.Handler, error) {
	p, err := servedAssets()
	if err != nil {
		return nil, err
	}
	files, build := p.files, p.build
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, r *http.Request) { files.serve(w, r, "index.html", revalidate) }
	for _, p := range pagePatterns {
		mux.HandleFunc(p, page)
	}
	asset := func(w http.ResponseWriter, r *http.Request, cache string) {
		name := r.PathValue("file")
		if name == "index.html" {
			http.Redirect(w, r, "/", http.StatusMovedPermanently)
			return
		}
		files.serve(w, r, name, cache)
	}
	mux.HandleFunc("GET /static/{file...}", func(w http.ResponseWriter, r *http.Request) { asset(w, r, revalidate) })
	// This build's prefix is cached for good; another's (a page loaded
	// before an upgrade) gets this build's files, revalidated.
	mux.HandleFunc("GET /static/v/{build}/{file...}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("build") == build {
			asset(w, r, immutable)
		} else {
			asset(w, r, revalidate)
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, r, nil, httpx.ErrNotFound)
	})
	return withSecurityHeaders(mux), nil
}

// served are the embedded assets as the UI serves them, and the name of
// their build.
type served struct {
	files assets
	build string
}

// servedAssets reads, compresses and hashes the embedded assets once per
// process (they are compiled in): every UI shares them, and only reads
// them.
var servedAssets = sync.OnceValues(func() (served, error) {
	files, err := loadAssets()
	if err != nil {
		return served{}, fmt.Errorf("web: embedded assets: %w", err)
	}
	if _, ok := files["index.html"]; !ok {
		return served{}, errors.New("web: embedded assets: no index.html")
	}
	build := files.build()
	if err := files.versionPage(build); err != nil {
		return served{}, fmt.Errorf("web: embedded assets: %w", err)
	}
	return served{files: files, build: build}, nil
})

// pagePatterns are the UI's own paths; each serves the one page, whose
// script shows what the path names.
var pagePatterns = []string{"GET /{$}", "GET /runs/{id}", "GET /approvals", "GET /approvals/{id}", "GET /apps", "GET /operator",
	"GET /review", "GET /review/{section}", "GET /review/audit/{seq}"}

// Mount adds the sign-in endpoints of s (nil: browser sign-in off) and the
// Sessions UI to mux. It claims "/auth/", "/static/" and the page paths
// only, so mux may keep a catch-all "/" of its own.
func Mount(mux *http.ServeMux, s *Sessions) error {
	ui, err := UI()
	if err != nil {
		return err
	}
	mux.Handle("/auth/", s.Handler())
	for _, p := range pagePatterns {
		mux.Handle(p, ui)
	}
	mux.Handle("GET /static/", ui)
	return nil
}
