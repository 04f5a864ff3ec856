package child

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// UsherReady matches the line `usher serve` prints once it serves; its
// submatch is the URL.
var UsherReady = regexp.MustCompile(`Usher is running at (http://\S+)`)

// Process is a process a benchmark started.
type Process struct {
	Name string
	Log  string // its standard error and the rest of its output
	cmd  *exec.Cmd
	done chan error
}

// Start starts path with args, its standard error (and its standard
// output once ready matched) appended to the file logPath, and waits at
// most 60 s until a line of its standard output matches ready; it returns
// the line's first submatch. The process inherits this one's environment.
func Start(name, logPath, path string, ready *regexp.Regexp, args ...string) (*Process, string, error) {
	return StartEnv(name, logPath, path, nil, ready, args...)
}

// StartEnv is Start with env as the process's whole environment (nil:
// this one's).
func StartEnv(name, logPath, path string, env []string, ready *regexp.Regexp, args ...string) (*Process, string, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan error, 1)}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(logFile, sc.Text())
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		io.Copy(logFile, stdout) //nolint:errcheck // the rest of its output, to the log
		p.done <- cmd.Wait()
		logFile.Close()
	}()
	select {
	case v := <-found:
		return p, v, nil
	case err := <-p.done:
		return nil, "", fmt.Errorf("%s exited before it was ready: %v; its log: %s\n%s", name, err, logPath, Tail(logPath))
	case <-time.After(60 * time.Second):
		p.Stop() //nolint:errcheck // it failed already
		return nil, "", fmt.Errorf("%s was not ready within 60 s; its log: %s\n%s", name, logPath, Tail(logPath))
	}
}

// Pid is the process's id, for its CPU time.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop asks the process to stop (SIGTERM) and kills it if it has not
// within 15 s.
func (p *Process) Stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("%s: %v; its log: %s", p.Name, err, p.Log)
		}
		return err
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill() //nolint:errcheck // it may have exited
		<-p.done
		return fmt.Errorf("%s did not stop within 15 s of SIGTERM; killed", p.Name)
	}
}

// Tail returns the last lines of a log file, for an error message.
func Tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}

// LoadAverage returns the 1-minute load average, from /proc/loadavg, or
// -1 when it cannot be read.
func LoadAverage() float64 {
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
