package usher

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxWiringLines is the longest a function of a command may be.
const maxWiringLines = 60

// TestCommandsOnlyWire holds the commands (cmd/…) to wiring: reading
// flags and configuration, building each package's parts from them and
// starting them, printing what they return. The rule, checked on every
// non-test file of a command:
//   - it declares nothing exported (type, function, variable or constant;
//     methods that satisfy an interface, such as a flag.Value's, are
//     allowed): a type another package could use belongs to the package
//     that owns what it means;
//   - no function is longer than maxWiringLines lines: a step of wiring is
//     a call into the package that owns it, and a longer function is a
//     decision or a mapping to move to its owner (or a list of steps to
//     split, as serve's parts are).
func TestCommandsOnlyWire(t *testing.T) {
	files, err := filepath.Glob("cmd/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		checked++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, problem := range wiringProblems(fset, f) {
			t.Errorf("%s: %s", path, problem)
		}
	}
	if checked == 0 {
		t.Fatal("no command source found under cmd/")
	}
}

// wiringProblems lists where f breaks TestCommandsOnlyWire's rule.
func wiringProblems(fset *token.FileSet, f *ast.File) []string {
	var out []string
	line := func(p token.Pos) int { return fset.Position(p).Line }
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.IsExported() {
				out = append(out, "exported function "+d.Name.Name)
			}
			if n := line(d.End()) - line(d.Pos()) + 1; n > maxWiringLines {
				out = append(out, fmt.Sprintf("%s is %d lines long, more than %d", d.Name.Name, n, maxWiringLines))
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						out = append(out, "exported type "+s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							out = append(out, "exported "+d.Tok.String()+" "+n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// TestWiringRuleFails shows that the rule catches what it names.
func TestWiringRuleFails(t *testing.T) {
	src := "package main\n\ntype Exported struct{}\n\nvar Shared = 1\n\nfunc Helper() {}\n\nfunc (Exported) String() string { return \"\" }\n\nfunc long() {\n" +
		strings.Repeat("\t_ = 0\n", maxWiringLines) + "}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "main.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(wiringProblems(fset, f), "; ")
	want := "exported type Exported; exported var Shared; exported function Helper; long is 62 lines long, more than 60"
	if got != want {
		t.Errorf("problems = %q,\nwant       %q", got, want)
	}
}

// TestReadmeNamesEveryPackage holds the README's architecture table to
// the code: every directory with a Go package (tests and testdata aside)
// is named in it, in backquotes, as the owner of something.
func TestReadmeNamesEveryPackage(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Architecture\n")
	if !ok {
		t.Fatal("the README has no Architecture section")
	}
	dirs := map[string]bool{}
	walkGo(t, func(path string) {
		if strings.HasSuffix(path, "_test.go") || strings.Contains(path, "testdata") {
			return
		}
		if dir := filepath.ToSlash(filepath.Dir(path)); dir != "." {
			dirs[dir] = true
		}
	})
	for dir := range dirs {
		if !strings.Contains(table, "`"+dir+"`") {
			t.Errorf("the README's architecture table does not name %s", dir)
		}
	}
}
