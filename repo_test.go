package usher

import (
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs checks that every package has a doc.go whose package
// comment says what the package owns ("Package x owns …"), except main
// packages, whose comment starts "Command x".
func TestPackageDocs(t *testing.T) {
	type pkg struct{ name, doc string }
	pkgs := map[string]*pkg{}
	walkGo(t, func(path string) {
		if strings.HasSuffix(path, "_test.go") || strings.Contains(path, "testdata") {
			return
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(path)
		p := pkgs[dir]
		if p == nil {
			p = &pkg{name: f.Name.Name}
			pkgs[dir] = p
		}
		if f.Doc != nil {
			if p.doc != "" {
				t.Errorf("%s: package comment in more than one file", path)
			}
			p.doc = f.Doc.Text()
		}
	})
	for dir, p := range pkgs {
		want := "Package " + p.name + " owns "
		if p.name == "main" {
			want = "Command " + filepath.Base(dir) + " "
		} else if _, err := os.Stat(filepath.Join(dir, "doc.go")); err != nil {
			t.Errorf("%s: no doc.go", dir)
		}
		if !strings.HasPrefix(p.doc, want) {
			t.Errorf("%s: package comment should start %q, got %q", dir, want, firstLine(p.doc))
		}
	}
}

// TestGofmt checks that every Go file is gofmt-formatted.
func TestGofmt(t *testing.T) {
	walkGo(t, func(path string) {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out, err := format.Source(src)
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if string(out) != string(src) {
			t.Errorf("%s: not gofmt-formatted", path)
		}
	})
}

func walkGo(t *testing.T, fn func(path string)) {
	t.Helper()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "data" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			fn(path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestNoticeCarriesDependencies checks that NOTICE reproduces the NOTICE
// file of every module the usher binary is built from that has one, as
// the Apache License 2.0 asks of whoever distributes it: a dependency
// added with a NOTICE fails this until its notice is in NOTICE.
func TestNoticeCarriesDependencies(t *testing.T) {
	notice, err := os.ReadFile("NOTICE")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Dir}}{{end}}", "./cmd/usher").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		path, dir, _ := strings.Cut(strings.TrimSpace(line), " ")
		if path == "" || dir == "" || seen[path] || strings.HasPrefix(path, "github.com/usherhq/usher") {
			continue
		}
		seen[path] = true
		theirs, err := os.ReadFile(filepath.Join(dir, "NOTICE"))
		if err != nil {
			continue // no NOTICE: nothing to carry
		}
		if !strings.Contains(string(notice), "== "+path+"\n\n"+strings.TrimRight(string(theirs), "\n")+"\n") {
			t.Errorf("NOTICE lacks the notice of %s, as its NOTICE file says it", path)
		}
	}
	if len(seen) < 10 {
		t.Errorf("go list named %d modules: the check read too little to mean anything", len(seen))
	}
}
