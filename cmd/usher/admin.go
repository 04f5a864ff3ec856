package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/store"
)

// errFailed is returned after a command has already printed why it failed
// (a policy mismatch, a broken audit chain): exit 1, nothing more to say.
var errFailed = errors.New("failed")

// policyCmd runs `usher policy check|explain|test`. They read files only,
// except explain, which reads the tool catalog to learn a tool's
// definition hash and whether the lock reviews it.
func (e *environment) policyCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, "usage: usher policy check|explain|test [flags]\n")
		return errUsage
	}
	var f installFlags
	fs := e.flagSet("policy " + args[0])
	f.register(fs)
	file := fs.String("policy", "", "Cedar policy `file` (default: policy.file, else the shipped default)")
	lockFile := fs.String("lock", "", "tool lock `file` (default: policy.lock_file)")
	switch args[0] {
	case "check":
		if err := parse(fs, args[1:]); err != nil {
			return err
		}
		p, lock, err := e.policyAndLock(&f, *file, *lockFile)
		if err != nil {
			return err
		}
		findings := p.Lint(lock)
		for _, fd := range findings {
			fmt.Fprintln(e.stdout, fd)
		}
		if len(findings) > 0 {
			fmt.Fprintf(e.stdout, "%s: valid with findings, %d finding(s), hash %s\n", p.Name(), len(findings), p.Hash())
			return errFailed
		}
		fmt.Fprintf(e.stdout, "%s: valid, 0 finding(s), hash %s\n", p.Name(), p.Hash())
		return nil
	case "explain":
		user := fs.String("user", "", "principal `id` (issuer|tenant|object id) or a user name (required)")
		tool := fs.String("tool", "", "tool `name` as listed (required)")
		server := fs.String("server", policy.BuiltinServer, "the tool's `server`: builtin or an upstream's name")
		argsJSON := fs.String("args", "{}", "the call's arguments, a JSON `object`")
		groups := fs.String("groups", "", "comma-separated `groups` of the user")
		hash := fs.String("definition-hash", "", "the tool's definition `hash` (default: from the catalog)")
		if err := parse(fs, args[1:]); err != nil {
			return err
		}
		if *user == "" || *tool == "" {
			fmt.Fprintln(e.stderr, "usher policy explain: --user and --tool are required")
			return errUsage
		}
		p, lock, err := e.policyAndLock(&f, *file, *lockFile)
		if err != nil {
			return err
		}
		if *hash == "" {
			if *hash, err = e.catalogHash(ctx, &f, *tool); err != nil {
				return err
			}
		}
		req := policy.Request{
			Principal: principalOf(*user, "", nil),
			Tool:      policy.Tool{Name: *tool, Server: *server, DefinitionHash: *hash, Reviewed: lock.Reviewed(*tool, *hash)},
			Arguments: json.RawMessage(*argsJSON),
		}
		if *groups != "" {
			req.Principal.Groups = strings.Split(*groups, ",")
		}
		fmt.Fprint(e.stdout, policy.Explain(req, p.Decide(req)))
		return nil
	case "test":
		files, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(files) != 1 {
			fmt.Fprintln(e.stderr, "usage: usher policy test [--policy FILE] CASES.yaml")
			return errUsage
		}
		p, _, err := e.policyAndLock(&f, *file, *lockFile)
		if err != nil {
			return err
		}
		cases, err := policy.LoadCases(files[0])
		if err != nil {
			return err
		}
		failed := 0
		for _, r := range policy.RunCases(p, cases) {
			fmt.Fprintln(e.stdout, r)
			if !r.Passed() {
				failed++
			}
		}
		fmt.Fprintf(e.stdout, "%d passed, %d failed\n", len(cases)-failed, failed)
		if failed > 0 {
			return errFailed
		}
		return nil
	}
	fmt.Fprintf(e.stderr, "usher policy: unknown command %q (want check, explain or test)\n", args[0])
	return errUsage
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// policyAndLock loads the policy and lock named by flags or configuration.
func (e *environment) policyAndLock(f *installFlags, file, lockFile string) (*policy.Policy, *policy.Lock, error) {
	cfg, _, err := e.loadConfig(f)
	if err != nil {
		return nil, nil, err
	}
	if file != "" {
		cfg.Policy.File = file
	}
	if lockFile != "" {
		cfg.Policy.LockFile = lockFile
	}
	in := &installation{cfg: cfg}
	p, err := in.loadPolicy()
	if err != nil {
		return nil, nil, err
	}
	lock, err := in.loadLock()
	return p, lock, err
}

// catalogHash returns the current definition hash of a tool.
func (e *environment) catalogHash(ctx context.Context, f *installFlags, tool string) (string, error) {
	defs, err := e.definitions(ctx, f)
	if err != nil {
		return "", err
	}
	if h, ok := defs[tool]; ok {
		return h, nil
	}
	return "", fmt.Errorf("no tool %q in the catalog; pass --definition-hash to explain it anyway", tool)
}

// definitions lists every tool of the installation's catalog with its hash.
func (e *environment) definitions(ctx context.Context, f *installFlags) (map[string]string, error) {
	cfg, log, err := e.loadConfig(f)
	if err != nil {
		return nil, err
	}
	in, err := open(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	cat, err := in.catalog(nil)
	if err != nil {
		return nil, err
	}
	defer cat.Close()
	defs, err := cat.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(defs))
	for _, d := range defs {
		out[d.Name] = d.Hash
	}
	return out, nil
}

// toolsCmd runs `usher tools lock|diff`.
func (e *environment) toolsCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "lock" && args[0] != "diff") {
		fmt.Fprint(e.stderr, "usage: usher tools lock|diff [--lock FILE] [flags]\n")
		return errUsage
	}
	var f installFlags
	fs := e.flagSet("tools " + args[0])
	f.register(fs)
	lockFile := fs.String("lock", "", "tool lock `file` (default: policy.lock_file)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cfg, _, err := e.loadConfig(&f)
	if err != nil {
		return err
	}
	path := cfg.Policy.LockFile
	if *lockFile != "" {
		path = *lockFile
	}
	current, err := e.definitions(ctx, &f)
	if err != nil {
		return err
	}
	lock, err := policy.ReadLock(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	changes := policy.Diff(lock, current)
	for _, c := range changes {
		fmt.Fprintln(e.stdout, c)
	}
	if args[0] == "diff" {
		if len(changes) == 0 {
			fmt.Fprintf(e.stdout, "%s matches all %d tools\n", path, len(current))
			return nil
		}
		return errFailed
	}
	if err := (&policy.Lock{Tools: current}).Write(path); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d tools, %d change(s)\n", path, len(current), len(changes))
	return nil
}

// auditCmd runs `usher audit verify|export`.
func (e *environment) auditCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "verify" && args[0] != "export") {
		fmt.Fprint(e.stderr, "usage: usher audit verify [--anchor SEQ:HASH] | usher audit export [--after SEQ]\n")
		return errUsage
	}
	var f installFlags
	fs := e.flagSet("audit " + args[0])
	f.register(fs)
	anchor := fs.String("anchor", "", "a head recorded earlier, `SEQ:HASH`: verify also proves nothing before it was cut off or rewritten")
	after := fs.Int64("after", 0, "export records after this `seq`")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cfg, log, err := e.loadConfig(&f)
	if err != nil {
		return err
	}
	in, err := open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer in.Close()
	if args[0] == "export" {
		return audit.Export(ctx, in.store, e.stdout, *after)
	}
	var anchors []store.AuditHead
	if *anchor != "" {
		var h store.AuditHead
		seq, hash, ok := strings.Cut(*anchor, ":")
		if _, err := fmt.Sscan(seq, &h.Seq); !ok || err != nil || hash == "" {
			fmt.Fprintln(e.stderr, "usher audit verify: --anchor wants SEQ:HASH")
			return errUsage
		}
		h.Hash = hash
		anchors = append(anchors, h)
	}
	rep, err := audit.Verify(ctx, in.store, anchors...)
	if err != nil {
		return err
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(e.stdout, p)
	}
	if !rep.Intact() {
		fmt.Fprintf(e.stdout, "audit log BROKEN: %d problem(s) in %d records\n", rep.ProblemCount, rep.Records)
		return errFailed
	}
	fmt.Fprintf(e.stdout, "audit log intact: %d records, head %d:%s\n", rep.Records, rep.Head.Seq, rep.Head.Hash)
	return nil
}
