// Command testreport reads the events of a test run (`go test -json`, as
// gotestsum's --jsonfile writes them) and says what a person needs after
// it: each package's time against its share of the -timeout, the slowest
// tests, what was skipped and why (one line per reason), which test was
// running when a package timed out, and the count of tests passed, failed
// and skipped. It exits 1 when a package took more than -budget of the
// -timeout, or when a package failed without a failing test to show for it.
//
// Usage:
//
//	testreport -timeout 10m [-budget 0.4] [-slowest 10] FILE.json
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

// errOverBudget is returned when the report found a problem it has printed.
var errOverBudget = errors.New("a package is over its time budget")

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("testreport", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 10*time.Minute, "the -timeout the packages ran with")
	budget := fs.Float64("budget", 0.4, "the share of -timeout a package may take")
	slowest := fs.Int("slowest", 10, "how many of the slowest tests to list")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *timeout <= 0 || *budget <= 0 || *budget > 1 {
		return errors.New("usage: testreport -timeout D [-budget F] [-slowest N] FILE.json")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := read(f)
	if err != nil {
		return err
	}
	return r.print(out, *timeout, *budget, *slowest)
}
