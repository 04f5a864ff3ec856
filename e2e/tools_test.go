package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

// nodeTools are the pinned Node.js programs of package.json, installed into
// node_modules by `make e2e-deps`.
type nodeTools struct {
	dir string // node_modules/.bin, absolute
	// node is the pinned Node.js (the npm package "node"): the machine's
	// own may be too old for the tools.
	node string
}

// nodeMajor is the Node.js major version package.json pins.
const nodeMajor = "v22."

var (
	toolsOnce sync.Once
	tools     nodeTools
	toolsErr  error
)

// requireTools returns the installed tools. When they are missing the
// test is skipped, or fails under CI (testenv.Missing).
func requireTools(t *testing.T) nodeTools {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end tests are skipped in -short mode")
	}
	toolsOnce.Do(func() { tools, toolsErr = findTools() })
	if toolsErr != nil {
		testenv.Missing(t, fmt.Sprintf("Node.js tools: %v; install them with `make e2e-deps`", toolsErr))
	}
	return tools
}

// findTools checks that the pinned Node.js and the packages' programs are
// there, and that the Node.js runs.
func findTools() (nodeTools, error) {
	dir, err := filepath.Abs(filepath.Join("node_modules", ".bin"))
	if err != nil {
		return nodeTools{}, err
	}
	nt := nodeTools{dir: dir, node: filepath.Join(dir, "node")}
	for _, name := range []string{"node", "conformance", "mcp-inspector"} {
		if _, err := nt.program(name); err != nil {
			return nodeTools{}, fmt.Errorf("the end-to-end tools are not installed: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, nt.node, "--version").Output()
	if err != nil {
		return nodeTools{}, fmt.Errorf("the pinned Node.js does not run: %v", err)
	}
	if v := strings.TrimSpace(string(out)); !strings.HasPrefix(v, nodeMajor) {
		return nodeTools{}, fmt.Errorf("node_modules holds Node.js %s; package.json pins %s", v, nodeMajor+"x")
	}
	return nt, nil
}

// packagePrograms are the programs found by their package rather than by
// node_modules/.bin, where two packages install a program of one name:
// the suite's release and its pre-release (conformance-next) both install
// "conformance", and which one npm links there is not fixed.
var packagePrograms = map[string]string{
	"conformance": filepath.Join("@modelcontextprotocol", "conformance", "dist", "index.js"),
}

// program returns the file of the package program name.
func (nt nodeTools) program(name string) (string, error) {
	if p, ok := packagePrograms[name]; ok {
		script := filepath.Join(filepath.Dir(nt.dir), p)
		_, err := os.Stat(script)
		return script, err
	}
	return filepath.EvalSymlinks(filepath.Join(nt.dir, name))
}

// command returns the command that runs the package program name (a file
// in node_modules/.bin) with the pinned Node.js, whatever node is first on
// the machine's PATH. Its HOME is home, so that nothing it stores there
// outlives the test, and its PATH starts with the pinned tools.
func (nt nodeTools) command(ctx context.Context, home, name string, args ...string) (*exec.Cmd, error) {
	script, err := nt.program(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, nt.node, append([]string{script}, args...)...)
	env := []string{"HOME=" + home, "PATH=" + nt.dir + string(os.PathListSeparator) + os.Getenv("PATH"), "NO_COLOR=1"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "HOME" || k == "PATH" || strings.HasPrefix(k, "USHER_") || strings.HasPrefix(k, "npm_"):
		default:
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	return cmd, nil
}

// run runs a package program and returns its standard output and error.
func (nt nodeTools) run(ctx context.Context, home, name string, args ...string) (stdout, stderr string, err error) {
	cmd, err := nt.command(ctx, home, name, args...)
	if err != nil {
		return "", "", err
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}
