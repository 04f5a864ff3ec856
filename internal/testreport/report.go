package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// pkg is what the run said of one package.
type pkg struct {
	name    string
	elapsed time.Duration
	outcome string // pass, fail, skip (no test files), or "" (never ended)
	output  []string
	running []string // the tests named by a timeout's "running tests:"
	timeout string   // the panic's "test timed out after D", if any
	failed  int      // failing tests
}

// test is one test's end.
type test struct {
	pkg, name string
	elapsed   time.Duration
	outcome   string
	reason    string // a skip's message
}

// report is a whole run.
type report struct {
	pkgs  map[string]*pkg
	tests []test
}

// read reads the events. A line that is not an event (a build error
// printed by go test) is kept as output of no package.
func read(r io.Reader) (*report, error) {
	rep := &report{pkgs: map[string]*pkg{}}
	outputs := map[[2]string][]string{} // by package and test
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Action == "" {
			continue
		}
		p := rep.pkgs[e.Package]
		if p == nil {
			p = &pkg{name: e.Package}
			rep.pkgs[e.Package] = p
		}
		key := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output":
			outputs[key] = append(outputs[key], e.Output)
			p.output = append(p.output, e.Output)
		case "pass", "fail", "skip":
			d := time.Duration(e.Elapsed * float64(time.Second))
			if e.Test == "" {
				p.elapsed, p.outcome = d, e.Action
				continue
			}
			t := test{pkg: e.Package, name: e.Test, elapsed: d, outcome: e.Action}
			if e.Action == "skip" {
				t.reason = skipReason(outputs[key])
			}
			if e.Action == "fail" {
				p.failed++
			}
			rep.tests = append(rep.tests, t)
			delete(outputs, key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, p := range rep.pkgs {
		p.timeout, p.running = timedOut(p.output)
	}
	return rep, nil
}

var (
	sourceLine  = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)
	timeoutLine = regexp.MustCompile(`^panic: (test timed out after \S+)`)
	runningLine = regexp.MustCompile(`^\s+(Test\S*|Fuzz\S*|Example\S*) \(([^)]*)\)$`)
)

// skipReason is the message a skipped test logged last — what it gave
// t.Skip — without the file:line prefix; a message of several lines is
// joined into one.
func skipReason(output []string) string {
	reason := ""
	for _, l := range output {
		l = strings.TrimRight(l, "\n")
		switch m := sourceLine.FindStringSubmatch(l); {
		case m != nil:
			reason = m[1]
		case reason != "" && !strings.HasPrefix(strings.TrimSpace(l), "---") && !strings.HasPrefix(l, "==="):
			if s := strings.TrimSpace(l); s != "" {
				reason += " " + s
			}
		}
	}
	if reason == "" {
		return "(no reason given)"
	}
	return reason
}

// timedOut finds a test binary's timeout panic in a package's output and
// the tests it says were running.
func timedOut(output []string) (string, []string) {
	for i, l := range output {
		m := timeoutLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var running []string
		for _, next := range output[i+1:] {
			next = strings.TrimRight(next, "\n")
			if strings.TrimSpace(next) == "running tests:" {
				continue
			}
			r := runningLine.FindStringSubmatch(next)
			if r == nil {
				break
			}
			running = append(running, r[1]+" ("+r[2]+")")
		}
		return m[1], running
	}
	return "", nil
}

// short is a package's path without the module's.
func short(name string) string {
	if i := strings.Index(name, "/usher/"); i >= 0 {
		return name[i+len("/usher/"):]
	}
	if strings.HasSuffix(name, "/usher") {
		return "."
	}
	return name
}

// print writes the report and returns errOverBudget when a package is over
// its budget or failed with nothing to show for it.
func (r *report) print(w io.Writer, timeout time.Duration, budget float64, slowest int) error {
	limit := time.Duration(float64(timeout) * budget)
	var pkgs []*pkg
	for _, p := range r.pkgs {
		if p.name != "" && p.outcome != "skip" {
			pkgs = append(pkgs, p)
		}
	}
	slices.SortFunc(pkgs, func(a, b *pkg) int { return cmp.Or(cmp.Compare(b.elapsed, a.elapsed), strings.Compare(a.name, b.name)) })

	fmt.Fprintf(w, "\nSlowest packages, against a budget of %s each (%.0f%% of -timeout %s):\n", limit, 100*budget, timeout)
	for i, p := range pkgs {
		if i == slowest {
			break
		}
		fmt.Fprintf(w, "  %7.1fs  %3.0f%% of the budget  %s\n", p.elapsed.Seconds(), 100*float64(p.elapsed)/float64(limit), short(p.name))
	}

	var top []test
	for _, t := range r.tests {
		if !strings.Contains(t.name, "/") && t.outcome != "skip" {
			top = append(top, t)
		}
	}
	slices.SortFunc(top, func(a, b test) int { return cmp.Or(cmp.Compare(b.elapsed, a.elapsed), strings.Compare(a.name, b.name)) })
	fmt.Fprintf(w, "\nSlowest tests:\n")
	for i, t := range top {
		if i == slowest {
			break
		}
		fmt.Fprintf(w, "  %7.1fs  %s %s\n", t.elapsed.Seconds(), short(t.pkg), t.name)
	}

	// Skips, one line per reason: a skipped test's subtests never ran and
	// are not counted again.
	type group struct {
		reason string
		count  int
		pkgs   []string
	}
	var groups []*group
	byReason := map[string]*group{}
	passed, failed, skipped := 0, 0, 0
	for _, t := range r.tests {
		switch t.outcome {
		case "pass":
			passed++
		case "fail":
			failed++
		case "skip":
			skipped++
			g := byReason[t.reason]
			if g == nil {
				g = &group{reason: t.reason}
				byReason[t.reason] = g
				groups = append(groups, g)
			}
			g.count++
			if p := short(t.pkg); !slices.Contains(g.pkgs, p) {
				g.pkgs = append(g.pkgs, p)
			}
		}
	}
	if len(groups) > 0 {
		slices.SortFunc(groups, func(a, b *group) int {
			return cmp.Or(cmp.Compare(b.count, a.count), strings.Compare(a.reason, b.reason))
		})
		fmt.Fprintf(w, "\nSkipped:\n")
		for _, g := range groups {
			fmt.Fprintf(w, "  %d in %s: %s\n", g.count, strings.Join(g.pkgs, ", "), g.reason)
		}
	}

	var problems []string
	for _, p := range pkgs {
		if p.timeout != "" {
			running := "no test named"
			if len(p.running) > 0 {
				running = "running " + strings.Join(p.running, ", ")
			}
			problems = append(problems, fmt.Sprintf("%s: %s, %s", short(p.name), p.timeout, running))
		}
		if p.elapsed > limit {
			problems = append(problems, fmt.Sprintf("%s took %.1fs, over its budget of %s (%.0f%% of -timeout %s)",
				short(p.name), p.elapsed.Seconds(), limit, 100*budget, timeout))
		}
		if p.outcome == "fail" && p.failed == 0 && p.timeout == "" {
			problems = append(problems, fmt.Sprintf("%s failed outside its tests (build error, panic or exit): see its output above", short(p.name)))
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(w, "\nProblems:\n")
		for _, p := range problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	fmt.Fprintf(w, "\ntests: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if len(problems) > 0 {
		return errOverBudget
	}
	return nil
}
