package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

var usherReady = regexp.MustCompile(`Usher is running at (http://\S+)`)

// usherProcess is `usher serve`, started by the benchmark.
type usherProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

// startUsher starts `usher serve` with the configuration cfg on addr,
// its output to logPath, and waits until it says where it runs.
func startUsher(bin, cfg, addr, logPath string) (*usherProcess, string, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--addr", addr)
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, "", fmt.Errorf("start usher: %w", err)
	}
	p := &usherProcess{cmd: cmd, log: logPath, done: make(chan error, 1)}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(logFile, sc.Text())
			if m := usherReady.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		io.Copy(logFile, stdout) //nolint:errcheck // the rest of its output, to the log
		p.done <- cmd.Wait()
		logFile.Close()
	}()
	select {
	case u := <-found:
		return p, u, nil
	case err := <-p.done:
		return nil, "", fmt.Errorf("usher exited before it was ready: %v; its log: %s\n%s", err, logPath, tail(logPath))
	case <-time.After(60 * time.Second):
		p.stop() //nolint:errcheck // it failed already
		return nil, "", fmt.Errorf("usher was not ready within 60 s; its log: %s\n%s", logPath, tail(logPath))
	}
}

// stop asks usher to stop (SIGTERM) and kills it if it has not within
// 15 s.
func (p *usherProcess) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("usher: %v; its log: %s", err, p.log)
		}
		return err
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill() //nolint:errcheck // it may have exited
		<-p.done
		return fmt.Errorf("usher did not stop within 15 s of SIGTERM; killed")
	}
}

// freeAddr is a loopback address with a port free now: Usher is started
// on the same address twice (before and after the seeding), since the
// development sign-in's issuer, and so the person's id, includes it.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tail returns the last lines of a log file, for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}

// loadAverage returns the 1-minute load average, or -1.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// benchSchema is a schema of its own on the PostgreSQL server of
// TEST_DATABASE_URL, for one run.
type benchSchema struct {
	name string
	url  string // the server's URL on the schema
	conn *pgx.Conn
}

func openBenchSchema(ctx context.Context, base string) (*benchSchema, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("the database URL must be a postgres:// URL")
	}
	var b [8]byte
	rand.Read(b[:])
	d := &benchSchema{name: "usher_uibench_" + hex.EncodeToString(b[:])}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if d.conn, err = pgx.Connect(cctx, base); err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if _, err := d.conn.Exec(cctx, "CREATE SCHEMA "+pgx.Identifier{d.name}.Sanitize()); err != nil {
		d.conn.Close(ctx)
		return nil, fmt.Errorf("create the benchmark's schema: %w", err)
	}
	q := u.Query()
	q.Set("search_path", d.name)
	u.RawQuery = q.Encode()
	d.url = u.String()
	return d, nil
}

func (d *benchSchema) close(ctx context.Context) error {
	defer d.conn.Close(ctx)
	_, err := d.conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{d.name}.Sanitize()+" CASCADE")
	return err
}
