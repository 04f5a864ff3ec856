package usher

import (
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestDocRevisions checks that README.md and the docs in docs/ name no git
// revision but the one their figures were measured at. A doc that reports
// measurements declares that revision once, on a line of its own that
// begins "Measured at revision REV" (REV: 7 to 40 hex digits); any other
// revision it names fails, and so does any revision named by a doc that
// declares none. Figures of several revisions side by side are history,
// which lives in git, not in a doc that describes today.
//
// A revision is recognised as git abbreviates one: a word of 7 to 40
// lowercase hex digits with at least one digit and one letter, where a
// word runs over letters, digits, underscores and hyphens, so that a hex
// group of a UUID or of a hyphenated name is not one. Fenced code
// blocks hold commands and example data (an Idempotency-Key, an id in an
// answer), whose hex runs are values, not revisions: there a run counts
// only when git knows it as a commit. Where the repository's history is at
// hand (a clone, as under CI), the declared revision must be a commit of
// it; the check reads the local history only, never the network.
func TestDocRevisions(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "README.md")
	isCommit := localCommits(t)
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		declared := ""
		type mention struct {
			line int
			rev  string
		}
		var named []mention
		fenced := false
		n := 0
		for line := range strings.Lines(string(b)) {
			n++
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if m := declaredRevision.FindStringSubmatchIndex(line); m != nil && !fenced {
				rev := line[m[2]:m[3]]
				if declared != "" {
					t.Errorf("%s:%d: a second \"Measured at revision\" line (%s after %s): a doc declares one revision", doc, n, rev, declared)
				} else if declared = rev; isCommit != nil && !isCommit(rev) {
					t.Errorf("%s:%d: the declared revision %s is not a commit of this repository", doc, n, rev)
				}
				line = line[m[1]:] // the rest of the line names no other
			}
			for _, rev := range revisionsIn(line) {
				if !fenced || (isCommit != nil && isCommit(rev)) {
					named = append(named, mention{n, rev})
				}
			}
		}
		for _, m := range named {
			if declared == "" {
				t.Errorf("%s:%d: names revision %s, and the doc declares none (\"Measured at revision REV\"): describe today without it, or declare the one its figures were measured at", doc, m.line, m.rev)
			} else if !strings.HasPrefix(m.rev, declared) && !strings.HasPrefix(declared, m.rev) {
				t.Errorf("%s:%d: names revision %s, not the declared %s: report today's figures only", doc, m.line, m.rev, declared)
			}
		}
	}
}

// declaredRevision matches the line on which a doc declares the revision
// its figures were measured at.
var declaredRevision = regexp.MustCompile(`^Measured at revision ([0-9a-f]{7,40})\b`)

// word matches a word of a doc, hyphens and underscores included, so that
// a hex run inside a larger name (a UUID) is not read as a word of its own.
var word = regexp.MustCompile(`[0-9A-Za-z_-]+`)

// revision matches a word that looks like an abbreviated revision.
var revision = regexp.MustCompile(`^[0-9a-f]{7,40}$`)

// revisionsIn returns the words of line that look like an abbreviated
// revision: 7 to 40 lowercase hex digits with a digit and a letter.
func revisionsIn(line string) []string {
	var revs []string
	for _, w := range word.FindAllString(line, -1) {
		if revision.MatchString(w) && strings.ContainsAny(w, "0123456789") && strings.ContainsAny(w, "abcdef") {
			revs = append(revs, w)
		}
	}
	return revs
}

// localCommits returns a function that says whether rev is a commit of the
// repository's history, or nil when no history is at hand (no git, not a
// checkout, or a shallow one that may lack the commit): then only the form
// of the docs is checked.
func localCommits(t *testing.T) func(rev string) bool {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Log("git is not installed: the declared revisions are not looked up")
		return nil
	}
	out, err := exec.Command("git", "rev-parse", "--is-shallow-repository").Output()
	if err != nil || strings.TrimSpace(string(out)) != "false" {
		t.Logf("no full git history here (%v, %q): the declared revisions are not looked up", err, strings.TrimSpace(string(out)))
		return nil
	}
	return func(rev string) bool {
		return exec.Command("git", "cat-file", "-e", rev+"^{commit}").Run() == nil
	}
}
