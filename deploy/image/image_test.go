package image

import (
	"bytes"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store/storetest"
)

// ImageEnv names the variable holding the image under test, as buildah
// names it (usher:v1.2.3).
const ImageEnv = "USHER_TEST_IMAGE"

const noImage = "OCI image: " + ImageEnv + " is not set; `make image-test` builds the image and runs this test (as root, with buildah)"

// The image's user, binary and data directory (deploy/image/Containerfile).
const (
	user    = "65532:65532"
	uid     = 65532
	binary  = "/usr/local/bin/usher"
	dataDir = "data" // relative to the root
	sbom    = "usr/share/doc/usher/sbom.cdx.json"
	caFile  = "etc/ssl/certs/ca-certificates.crt"
)

// config is the part of the image's OCI configuration the test reads.
type config struct {
	User         string
	Env          []string
	Entrypoint   []string
	Cmd          []string
	WorkingDir   string
	ExposedPorts map[string]struct{}
	Labels       map[string]string
}

// TestImage checks the image's configuration and files, then runs its
// usher as the image would: `version`, `migrate` and `serve` (its command,
// on a loopback address of the test's) against a PostgreSQL schema of the
// test's own, until /readyz answers 200; SIGTERM must end it with status
// 0. Then the embedded default: `serve` on SQLite under /data, `backup`
// while it serves, `restore` and `audit verify` after. Nothing outside
// /data may have changed in the image's files.
func TestImage(t *testing.T) {
	image := os.Getenv(ImageEnv)
	if image == "" {
		testenv.Missing(t, noImage)
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "OCI image: the test mounts the image and runs it under chroot, which needs root")
	}
	if _, err := exec.LookPath("buildah"); err != nil {
		testenv.Missing(t, "OCI image: buildah is missing; install it (apt-get install buildah, as .ci/run does)")
	}
	dbURL := storetest.PostgresURL(t)

	cfg := inspect(t, image)
	checkConfig(t, cfg)
	root := mount(t, image)
	before := listing(t, root)
	checkFiles(t, root, cfg)

	// The image's environment, and nothing of the test's: an USHER_
	// variable here would change what is tested.
	env := slices.Clone(cfg.Env)
	out := run(t, root, env, "version")
	version := cfg.Labels["org.opencontainers.image.version"]
	if !strings.HasPrefix(out, "usher "+version+" ") && out != "usher "+version {
		t.Errorf("usher version = %q; want the version the label names, %q", out, version)
	}
	checkRevision(t, out, cfg.Labels["org.opencontainers.image.revision"])

	env = append(env, "USHER_DATABASE_URL="+dbURL)
	if out := run(t, root, env, "migrate"); !strings.Contains(out, "newest schema") {
		t.Errorf("usher migrate printed %q; want it to report the newest schema", out)
	}
	// With no data directory configured, the default ./data under the
	// image's working directory is /data: the generated key-encryption key
	// is there.
	if fi, err := os.Stat(filepath.Join(root, dataDir, "broker.key")); err != nil {
		t.Errorf("after migrate, /data/broker.key: %v; want the key usher generates in its default data directory", err)
	} else if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || fi.Mode().Perm() != 0o600 {
		t.Errorf("/data/broker.key is owned by %d with mode %v; want %d and 0600", st.Uid, fi.Mode().Perm(), uid)
	}

	serve(t, root, env, cfg, nil)

	// The embedded default on the image's /data: a backup while it
	// serves, and a restore once it stopped, as the image's user.
	embedded := slices.Clone(cfg.Env)
	serve(t, root, embedded, cfg, func() {
		out := run(t, root, embedded, "backup", "/data/usher-backup.db")
		if !strings.Contains(out, "backed up /data/usher.db to /data/usher-backup.db") {
			t.Errorf("usher backup in the image printed %q", out)
		}
	})
	if out := run(t, root, embedded, "restore", "/data/usher-backup.db"); !strings.Contains(out, "restored /data/usher.db") {
		t.Errorf("usher restore in the image printed %q", out)
	}
	if out := run(t, root, embedded, "audit", "verify"); !strings.Contains(out, "audit log intact") {
		t.Errorf("usher audit verify after the restore printed %q", out)
	}

	if after := listing(t, root); !slices.Equal(before, after) {
		t.Errorf("files outside /data changed while usher ran:\n%s", diff(before, after))
	}
}

// inspect returns the image's OCI configuration.
func inspect(t *testing.T, image string) config {
	t.Helper()
	out := buildah(t, "inspect", "--type", "image", image)
	var doc struct {
		OCIv1 struct {
			Config config `json:"config"`
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("buildah inspect %s: %v", image, err)
	}
	return doc.OCIv1.Config
}

// checkConfig checks the user, the command, the port and the labels.
func checkConfig(t *testing.T, cfg config) {
	t.Helper()
	if cfg.User != user {
		t.Errorf("user %q; want %q, numeric and not root", cfg.User, user)
	}
	if !slices.Equal(cfg.Entrypoint, []string{binary}) {
		t.Errorf("entrypoint %q; want [%s]", cfg.Entrypoint, binary)
	}
	if !slices.Equal(cfg.Cmd, []string{"serve"}) {
		t.Errorf("command %q; want [serve]", cfg.Cmd)
	}
	if cfg.WorkingDir != "/" {
		t.Errorf("working directory %q; want / (the default data directory ./data is then /data)", cfg.WorkingDir)
	}
	if _, ok := cfg.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("exposed ports %v; want 8080/tcp", cfg.ExposedPorts)
	}
	if !slices.Contains(cfg.Env, "PATH=/usr/local/bin") {
		t.Errorf("environment %q; want PATH=/usr/local/bin, where usher is", cfg.Env)
	}
	if !slices.Contains(cfg.Env, "TMPDIR=/data") {
		t.Errorf("environment %q; want TMPDIR=/data, the only writable path", cfg.Env)
	}
	for _, k := range []string{"source", "version", "revision", "licenses", "created", "title", "description"} {
		if cfg.Labels["org.opencontainers.image."+k] == "" {
			t.Errorf("label org.opencontainers.image.%s is missing or empty", k)
		}
	}
	if l := cfg.Labels["org.opencontainers.image.licenses"]; l != "Apache-2.0" {
		t.Errorf("licenses label %q; want Apache-2.0", l)
	}
	if c := cfg.Labels["org.opencontainers.image.created"]; c != "" {
		if _, err := time.Parse(time.RFC3339, c); err != nil {
			t.Errorf("created label %q is not an RFC 3339 time", c)
		}
	}
}

var commit = regexp.MustCompile(`\bcommit ([0-9a-f]{7,})\b`)

// checkRevision checks that the revision label is a full commit hash and,
// when the binary names its commit, that it is the same one. A binary
// built outside a git checkout (or in a linked worktree, which the go
// command does not read) names none; under CI, built from a clone, it must.
func checkRevision(t *testing.T, version, revision string) {
	t.Helper()
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(revision) {
		t.Errorf("revision label %q; want a full commit hash", revision)
	}
	m := commit.FindStringSubmatch(version)
	switch {
	case m != nil && !strings.HasPrefix(revision, m[1]):
		t.Errorf("usher version names commit %s; the revision label is %s", m[1], revision)
	case m == nil && testenv.UnderCI():
		t.Errorf("usher version = %q names no commit; under CI the binary is built from a clone and must", version)
	case m == nil:
		t.Logf("usher version = %q names no commit (built outside a clone): the revision label is not compared", version)
	}
}

// checkFiles checks the files: nothing the image's user may write outside
// /data, the CA bundle, and an SBOM that names every module the binary
// is built from.
func checkFiles(t *testing.T, root string, cfg config) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(root, dataDir))
	if err != nil {
		t.Fatalf("/data: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || st.Uid != uid || st.Gid != uid {
		t.Errorf("/data: a directory owned by %d:%d; want one owned by %s", st.Uid, st.Gid, user)
	}
	outsideData(t, root, func(path string, fi fs.FileInfo, st *syscall.Stat_t) {
		mode := fi.Mode()
		if st.Uid == uid || (st.Gid == uid && mode&0o020 != 0) || (mode&0o002 != 0 && mode&fs.ModeSymlink == 0) {
			t.Errorf("%s (owner %d:%d, mode %v) is writable by the image's user: only /data may be", path, st.Uid, st.Gid, mode)
		}
	})

	pemCerts, err := os.ReadFile(filepath.Join(root, caFile))
	if err != nil {
		t.Fatalf("CA bundle: %v", err)
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(pemCerts) || bytes.Count(pemCerts, []byte("BEGIN CERTIFICATE")) < 100 {
		t.Errorf("/%s holds %d certificates; want Mozilla's roots (over 100), each parsed", caFile, bytes.Count(pemCerts, []byte("BEGIN CERTIFICATE")))
	}

	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct{ Name, Version string }
		}
		Components []struct{ Name, Version string }
	}
	b, err := os.ReadFile(filepath.Join(root, sbom))
	if err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatalf("SBOM /%s: %v", sbom, err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != testenv.Module {
		t.Errorf("SBOM: format %q, component %q; want CycloneDX of %s", bom.BOMFormat, bom.Metadata.Component.Name, testenv.Module)
	}
	if v := cfg.Labels["org.opencontainers.image.version"]; bom.Metadata.Component.Version != v {
		t.Errorf("SBOM: version %q; want the image's, %q", bom.Metadata.Component.Version, v)
	}
	bi, err := buildinfo.ReadFile(filepath.Join(root, binary))
	if err != nil {
		t.Fatalf("the image's binary: %v", err)
	}
	listed := map[string]bool{}
	for _, c := range bom.Components {
		listed[c.Name+"@"+c.Version] = true
	}
	if !listed["std@"+bi.GoVersion] {
		t.Errorf("SBOM lacks the standard library, std@%s", bi.GoVersion)
	}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		if !listed[m.Path+"@"+m.Version] {
			t.Errorf("SBOM lacks %s@%s, which the binary is built from", m.Path, m.Version)
		}
	}
	if len(bi.Deps) < 10 {
		t.Errorf("the binary names %d modules: too few for the check to mean anything", len(bi.Deps))
	}
}

// mount makes a working container of image, mounts its files and returns
// where; both are removed when the test ends.
func mount(t *testing.T, image string) string {
	t.Helper()
	name := strings.TrimSpace(buildah(t, "from", "--pull=false", "--name", "usher-image-test-"+strings.ReplaceAll(t.Name(), "/", "-")+fmt.Sprint(os.Getpid()), image))
	t.Cleanup(func() {
		if out, err := exec.Command("buildah", "rm", name).CombinedOutput(); err != nil {
			t.Errorf("buildah rm %s: %v\n%s", name, err, out)
		}
	})
	root := strings.TrimSpace(buildah(t, "mount", name))
	t.Cleanup(func() {
		if out, err := exec.Command("buildah", "umount", name).CombinedOutput(); err != nil {
			t.Errorf("buildah umount %s: %v\n%s", name, err, out)
		}
	})
	return root
}

func buildah(t *testing.T, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("buildah", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, &stderr)
	}
	return string(out)
}

// command is the image's binary with args, run under chroot in root as the
// image's user with env as its whole environment.
func command(root string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command("chroot", append([]string{"--userspec=" + user, root, binary}, args...)...)
	cmd.Env = env
	return cmd
}

// run runs one usher command to its end and returns its standard output,
// trimmed.
func run(t *testing.T, root string, env []string, args ...string) string {
	t.Helper()
	cmd := command(root, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("usher %s in the image: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, &stdout, &stderr)
	}
	return strings.TrimSpace(stdout.String())
}

// serve runs the image's command with a loopback address of the test's
// appended (the last --addr wins), waits for /readyz to answer 200, runs
// during (when not nil), then stops it with SIGTERM and checks that it
// exits with status 0.
func serve(t *testing.T, root string, env []string, cfg config, during func()) {
	t.Helper()
	addr := testenv.FreeAddr(t)
	cmd := command(root, env, append(slices.Clone(cfg.Cmd), "--addr", addr)...)
	output := &testenv.Output{}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("usher serve in the image:\n%s", output)
		}
	})

	client := &http.Client{Timeout: 5 * time.Second}
	testenv.WaitFor(t, 60*time.Second, func() bool {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("usher serve exited before it was ready: %v", err)
		default:
		}
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if during != nil {
		during()
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("usher serve ended with %v after SIGTERM; want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("usher serve did not stop within 30s of SIGTERM")
	}
}

// listing describes every file outside /data under root, one line each:
// path, type and mode, owner, size and modification time.
func listing(t *testing.T, root string) []string {
	t.Helper()
	var lines []string
	outsideData(t, root, func(path string, fi fs.FileInfo, st *syscall.Stat_t) {
		lines = append(lines, fmt.Sprintf("%s %v %d:%d %d %s", path, fi.Mode(), st.Uid, st.Gid, fi.Size(), fi.ModTime().UTC().Format(time.RFC3339Nano)))
	})
	return lines
}

// outsideData calls fn for every file under root but /data and what it
// holds, with its path in the image.
func outsideData(t *testing.T, root string, fn func(path string, fi fs.FileInfo, st *syscall.Stat_t)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == dataDir {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fn("/"+strings.TrimPrefix(rel, "."), fi, fi.Sys().(*syscall.Stat_t))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// diff lists the lines only one of before and after has.
func diff(before, after []string) string {
	var b strings.Builder
	for _, l := range before {
		if !slices.Contains(after, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range after {
		if !slices.Contains(before, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
