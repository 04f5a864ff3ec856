// Command usher is Usher's one binary: the server and its operator
// subcommands. It reads configuration, wires the packages together and runs
// them; everything else lives in the packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/usherhq/usher/internal/buildinfo"
	"github.com/usherhq/usher/internal/config"
)

const usage = `usher — an MCP-native assistant gateway with a token broker

Usage:
  usher serve   [flags]                 run the server
  usher migrate [flags]                 apply database migrations and exit
  usher token user --sub NAME [flags]   print an API access token from the built-in development provider
  usher token mcp --sub PRINCIPAL [--audience URL] [flags]
                                        print a broker token (mcp:invoke) for an MCP server
  usher policy check [--policy FILE] [--lock FILE]
                                        validate and lint the approval policy
  usher policy explain --user U --tool T [--args JSON] [--server S] [--groups G1,G2]
                                        explain the decision for one call
  usher policy test [--policy FILE] CASES.yaml
                                        check expected decisions; exit 1 on a mismatch
  usher tools diff [--lock FILE] [-json]
                                        compare the tool catalog with the lock: each change with its
                                        definitions, and the review digest; exit 1 on a change
  usher tools lock [--lock FILE] [--expect DIGEST]
                                        write the lock from the tools offered now; with --expect, only
                                        if they are still those of the review digest
  usher audit verify [--keys FILE] [--anchor SEQ:HASH]
                                        check the audit log's hash chain and its signed checkpoints
  usher audit export [--after SEQ]      write the audit log as JSON lines
  usher audit rotate-key                make a new audit signing key; the old ones stay published
  usher status [-json]                  the replicas alive, upstreams, the run queue, the oldest
                                        pending approval, the last audit checkpoint; exit 1 on a problem
  usher usage [--since DAY] [--until DAY] [--limit N] [-json]
                                        what each person's model requests used, by model (default: 30 days)
  usher clients list                    list the OAuth clients of external MCP apps
  usher clients revoke CLIENT_ID        revoke a client, its refresh tokens and its consents
  usher erase PRINCIPAL [--yes]         erase everything kept of a person but the audit log, audited;
                                        without --yes, print what would be erased
  usher export PRINCIPAL [--output FILE]
                                        everything kept of a person, as JSON, audited
  usher hold place PRINCIPAL --reason TEXT [--by NAME]
                                        keep a person's data: no purge, deletion or erasure erases it
  usher hold lift PRINCIPAL [--by NAME] lift it: the retention policy applies again
  usher hold list [-json]               the legal holds that stand
  usher keys reseal                     seal the stored signing keys again with broker.key_encryption_key
                                        (after it replaced the keys in broker.previous_key_encryption_keys)
  usher backup FILE|DIRECTORY           copy the embedded SQLite database while it serves, and print
                                        the copy's audit head (PostgreSQL: use its own tools)
  usher restore FILE                    put such a copy in place of the database, with no server running;
                                        the database it replaces is moved aside
  usher version                         print the version

Flags shared by every subcommand that opens the installation:
  --config FILE        YAML configuration file
  --addr HOST:PORT     listen address (server.addr)
  --data-dir DIR       data directory (server.data_dir)
  --database-url URL   postgres:// URL; empty means the embedded SQLite file

Every configuration key can also be set with USHER_<SECTION>_<KEY>,
for example USHER_SERVER_ADDR or USHER_IDENTITY_ISSUER.
`

// errUsage marks a command-line mistake: the usage text is printed and the
// exit code is 2.
var errUsage = errors.New("usage")

func main() {
	interrupt, stopInterrupt := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stopInterrupt()
	term, stopTerm := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stopTerm()
	ctx, stop := withDrain(interrupt, term)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		defer ignoreHangups(os.Getenv, os.Stderr)()
	}
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		// -h asked for the usage it printed: not a failure.
	case errors.Is(err, errUsage):
		os.Exit(2)
	case errors.Is(err, errFailed):
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "usher:", err)
		os.Exit(1)
	}
}

// ignoreHangups keeps SIGHUP from ending `usher serve` (by default it ends
// a Go program at once, without a drain) and logs each one: the server
// reloads nothing, since the policy file and the tool lock are read when
// it starts. The log line is in the format of USHER_LOG_FORMAT (text by
// default). It returns the function that stops ignoring.
func ignoreHangups(getenv func(string) string, stderr io.Writer) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		log := newLogger(config.Log{Level: "info", Format: getenv("USHER_LOG_FORMAT")}, stderr)
		for range hup {
			log.Warn("SIGHUP ignored: the policy file and the tool lock are read when usher serve starts, and nothing is reloaded; " +
				"restart the server (each replica: a rolling restart) to apply a change")
		}
	}()
	return func() {
		signal.Stop(hup)
		close(hup)
		<-done
	}
}

// run executes one command line. It is main without the process: tests call
// it directly.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	env := &environment{getenv: getenv, stdout: stdout, stderr: stderr}
	switch args[0] {
	case "serve":
		return env.serve(ctx, args[1:])
	case "migrate":
		return env.migrate(ctx, args[1:])
	case "token":
		return env.token(ctx, args[1:])
	case "policy":
		return env.policyCmd(ctx, args[1:])
	case "tools":
		return env.toolsCmd(ctx, args[1:])
	case "audit":
		return env.auditCmd(ctx, args[1:])
	case "clients":
		return env.clientsCmd(ctx, args[1:])
	case "status":
		return env.statusCmd(ctx, args[1:])
	case "usage":
		return env.usageCmd(ctx, args[1:])
	case "keys":
		return env.keysCmd(ctx, args[1:])
	case "erase":
		return env.eraseCmd(ctx, args[1:])
	case "export":
		return env.exportCmd(ctx, args[1:])
	case "hold":
		return env.holdCmd(ctx, args[1:])
	case "backup":
		return env.backupCmd(ctx, args[1:])
	case "restore":
		return env.restoreCmd(ctx, args[1:])
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "usher", buildinfo.Read())
		return nil
	case "help", "-h", "--help", "-help":
		if len(args) > 1 {
			return help(stdout, stderr, args[1])
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "usher: unknown command %q\n\n%s", args[0], usage)
	return errUsage
}

// help prints the lines of the usage about the command topic (such as
// "hold" or "audit"), and the flags every command that opens the
// installation takes; a topic that names no command is a usage error.
func help(stdout, stderr io.Writer, topic string) error {
	var b strings.Builder
	in := false
	for line := range strings.Lines(usage) {
		switch {
		case strings.HasPrefix(line, "  usher "+topic+" ") || line == "  usher "+topic+"\n":
			in = true
		case !strings.HasPrefix(line, "    "):
			in = false
		}
		if in {
			b.WriteString(line)
		}
	}
	if b.Len() == 0 {
		fmt.Fprintf(stderr, "usher: no command %q\n\n%s", topic, usage)
		return errUsage
	}
	_, shared, _ := strings.Cut(usage, "\nFlags shared")
	fmt.Fprintf(stdout, "Usage:\n%s\nFlags shared%s", b.String(), shared)
	return nil
}
