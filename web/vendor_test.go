package web

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"
)

// vendorDir holds others' code, served as it was released.
const vendorDir = "static/vendor"

// TestVendoredHighlighter checks the one vendored library, highlight.js:
// its files are the release's, byte for byte (SHA256SUMS), with its
// licence; only highlight.js loads it, and uses it as a tokenizer only —
// never its HTML output or the functions that write innerHTML — and the
// languages highlight.js names are the files vendored. (The release's
// code contains innerHTML, which TestScriptsHaveNoHTMLSinks refuses in
// the UI's own scripts.)
func TestVendoredHighlighter(t *testing.T) {
	const dir = vendorDir + "/highlight"
	sums, err := static.ReadFile(dir + "/SHA256SUMS")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(sums)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: bad line %q", line)
		}
		want[name] = sum
	}
	if _, err := static.ReadFile(dir + "/LICENSE"); err != nil {
		t.Errorf("the vendored highlight.js has no licence: %v", err)
	}
	seen := map[string]bool{}
	err = fs.WalkDir(static, vendorDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".js" {
			return err
		}
		name := strings.TrimPrefix(p, dir+"/")
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); want[name] != got {
			t.Errorf("%s: SHA-256 %s, SHA256SUMS has %q: vendored files are not edited", p, got, want[name])
		}
		seen[name] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("SHA256SUMS lists %s, which is not vendored", name)
		}
	}

	// Who loads it, and how.
	files, err := loadAssets()
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range files {
		if path.Ext(name) == ".js" && !strings.HasPrefix(name, "vendor/") && name != "js/highlight.js" &&
			strings.Contains(string(f.body), "/vendor/") {
			t.Errorf("%s refers to the vendored code: only js/highlight.js loads it", name)
		}
	}
	src := string(files["js/highlight.js"].body)
	for _, banned := range []string{"highlightElement", "highlightAll", "highlightBlock", ".value", "innerHTML"} {
		if strings.Contains(src, banned) {
			t.Errorf("js/highlight.js uses %s: highlight.js is a tokenizer here, its HTML is never used", banned)
		}
	}
	table := regexp.MustCompile(`(?m)^  '?([a-z]+)'?: \[`)
	langs := table.FindAllStringSubmatch(src[:strings.Index(src, "const LABELS")], -1)
	if len(langs) == 0 {
		t.Fatal("js/highlight.js: no languages found")
	}
	named := map[string]bool{}
	for _, m := range langs {
		named[m[1]] = true
		if _, ok := files["vendor/highlight/languages/"+m[1]+".min.js"]; !ok {
			t.Errorf("js/highlight.js names the language %s, which is not vendored", m[1])
		}
	}
	for name := range want {
		if l, ok := strings.CutPrefix(name, "languages/"); ok && !named[strings.TrimSuffix(l, ".min.js")] {
			t.Errorf("%s is vendored but js/highlight.js never loads it", name)
		}
	}
	if _, ok := files["vendor/highlight/core.min.js"]; !ok || !strings.Contains(src, "`${VENDOR}/core.min.js`") {
		t.Error("js/highlight.js does not load the vendored core")
	}
}
