package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/usherhq/usher/bench/child"
)

// usherRun is one `usher serve` of the run and what the load client needs
// of it.
type usherRun struct {
	variant   *variant // nil for -usher's plain Usher and -against's
	proc      *child.Process
	url       string // its listener, http://host:port
	debugAddr string // its debug listener, host:port
	cfg       string // its configuration file
	db        *benchDatabase
	via       *path     // the calls through it
	procs     processes // its process, the upstream's, its PostgreSQL backends'
}

// startUsher runs bin as `usher serve` in front of the upstream at upURL,
// with its configuration, log and data in dir, on a schema of its own of
// o.database (SQLite in dir without one), as an operator would: it writes
// the configuration, locks the tools, starts the server and mints a broker
// token for the calls through it. setup is its environment and its
// configuration's audit section. Its stop ends it.
func startUsher(ctx context.Context, o options, bin, dir, upURL string, upPid int, setup usherSetup) (u *usherRun, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	u = &usherRun{}
	defer func() {
		if err != nil {
			err = errors.Join(err, u.stop())
		}
	}()
	if o.database != "" {
		if u.db, err = openBenchDatabase(ctx, o.database, o.dbVia); err != nil {
			return u, err
		}
	}
	if u.cfg, err = writeConfig(dir, upURL, u.db, o.stateful || setup.stateful, setup.audit); err != nil {
		return u, err
	}
	if _, err := usherCommand(ctx, bin, "tools", "lock", "--config", u.cfg); err != nil {
		return u, err
	}
	if u.proc, u.url, err = child.StartEnv("usher", filepath.Join(dir, "usher.log"), bin, setup.env, child.UsherReady, "serve", "--config", u.cfg, "--addr", cmp.Or(setup.addr, "127.0.0.1:0")); err != nil {
		return u, err
	}
	// Usher logs the debug listener's address before it serves.
	log, _ := os.ReadFile(u.proc.Log)
	m := debugListen.FindSubmatch(log)
	if m == nil {
		return u, fmt.Errorf("usher's log names no debug listener: %s", u.proc.Log)
	}
	u.debugAddr = string(m[1])
	token, err := usherCommand(ctx, bin, "token", "mcp", "--sub", "bench-user", "--config", u.cfg, "--addr", strings.TrimPrefix(u.url, "http://"))
	if err != nil {
		return u, err
	}
	u.via = &path{name: "through Usher", tool: "up__echo", method: o.method, endpoint: u.url + "/mcp", token: token, protocol: o.protocol, idempotencyKey: o.idempotencyKey}
	u.procs = processes{usher: u.proc.Pid(), upstream: upPid, db: u.db}
	return u, nil
}

// stop ends the server and drops its schema.
func (u *usherRun) stop() error {
	var errs []error
	if u.proc != nil {
		errs = append(errs, u.proc.Stop())
	}
	if u.db != nil {
		errs = append(errs, u.db.close(context.Background()))
	}
	return errors.Join(errs...)
}

// verifyAudit checks that every call through u left its records (the
// decision and how it ended) in an intact chain, and returns how many
// records the log holds.
func (u *usherRun) verifyAudit(ctx context.Context, bin string) (int64, error) {
	verify, err := usherCommand(ctx, bin, "audit", "verify", "--config", u.cfg)
	if err != nil {
		return 0, err
	}
	intact := auditIntact.FindStringSubmatch(verify)
	if intact == nil {
		return 0, fmt.Errorf("usher audit verify: %s", verify)
	}
	var records int64
	fmt.Sscan(intact[1], &records) //nolint:errcheck // the pattern matched digits
	if calls := u.via.calls.Load(); records < 2*calls {
		return 0, fmt.Errorf("%d calls through Usher left %d audit records, want at least %d", calls, records, 2*calls)
	}
	return records, nil
}
