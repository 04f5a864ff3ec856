package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// EnvDir names the directory of prebuilt programs: `make test` sets it
// after building them (target testbin). It must hold every program a test
// asks for, built from the same source as the tests.
const EnvDir = "USHER_TEST_BIN"

// Module is Usher's module path: a package named relative to it (e.g.
// "cmd/usher") is one of Usher's.
const Module = "github.com/usherhq/usher"

var (
	mu     sync.Mutex
	dir    string                // this process's build directory, when it built anything
	builds = map[string]*build{} // by import path
)

// build is one program's build in this process.
type build struct {
	once sync.Once
	path string
	err  error
}

// Path returns the program built from the package pkg, an import path,
// or a path relative to Usher's module ("cmd/usher",
// "mcpserver/testdata/fixture"). The file is named after the package's
// last element. It is built with CGO_ENABLED=0 and -trimpath, as the
// released binary is.
func Path(t testing.TB, pkg string) string {
	t.Helper()
	p, err := lookup(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Usher returns the usher binary (Path of cmd/usher).
func Usher(t testing.TB) string {
	t.Helper()
	return Path(t, "cmd/usher")
}

func lookup(pkg string) (string, error) {
	importPath := pkg
	if !strings.Contains(strings.Split(pkg, "/")[0], ".") {
		importPath = Module + "/" + pkg
	}
	name := path.Base(importPath)
	if d := os.Getenv(EnvDir); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s has no %s (make testbin builds it): %v", EnvDir, d, name, err)
		}
		return p, nil
	}

	mu.Lock()
	b := builds[importPath]
	if b == nil {
		b = &build{}
		builds[importPath] = b
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "usher-testenv-")
		if err != nil {
			mu.Unlock()
			return "", err
		}
		dir = d
	}
	out := dir
	mu.Unlock()

	b.once.Do(func() {
		b.path = filepath.Join(out, name)
		cmd := exec.Command("go", "build", "-trimpath", "-o", b.path, importPath)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", importPath, err, msg)
		}
	})
	return b.path, b.err
}

// Remove deletes the programs this process built. A package whose tests
// use Path calls it from TestMain, after the tests.
func Remove() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		builds = map[string]*build{}
	}
}
