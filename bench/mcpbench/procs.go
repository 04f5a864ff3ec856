package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// child is a process the benchmark started: Usher or the upstream.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string // its standard error and the rest of its output
	done chan error
}

// startChild starts path with args, its standard error (and its standard
// output once ready matched) going to a log file in dir, and waits until a
// line of its standard output matches ready; it returns the line's first
// submatch.
func startChild(dir, name, path string, ready *regexp.Regexp, args ...string) (*child, string, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(path, args...)
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
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan error, 1)}
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
		c.done <- cmd.Wait()
		logFile.Close()
	}()
	select {
	case v := <-found:
		return c, v, nil
	case err := <-c.done:
		return nil, "", fmt.Errorf("%s exited before it was ready: %v; its log: %s\n%s", name, err, logPath, tail(logPath))
	case <-time.After(60 * time.Second):
		c.stop()
		return nil, "", fmt.Errorf("%s was not ready within 60 s; its log: %s\n%s", name, logPath, tail(logPath))
	}
}

// pid is the process's id, for its CPU time.
func (c *child) pid() int { return c.cmd.Process.Pid }

// stop asks the process to stop (SIGTERM) and kills it if it has not
// within 15 s.
func (c *child) stop() error {
	c.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
	select {
	case err := <-c.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("%s: %v; its log: %s", c.name, err, c.log)
		}
		return err
	case <-time.After(15 * time.Second):
		c.cmd.Process.Kill() //nolint:errcheck // it may have exited
		<-c.done
		return fmt.Errorf("%s did not stop within 15 s of SIGTERM; killed", c.name)
	}
}

// usherCommand runs one usher command and returns its standard output.
func usherCommand(ctx context.Context, usher string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, usher, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("usher %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// tail returns the last lines of a log file, for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}
