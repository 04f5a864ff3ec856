package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/store"
)

// errFailed is returned after a command has already printed why it failed
// (a policy mismatch, a broken audit chain): exit 1, nothing more to say.
var errFailed = errors.New("failed")

// definitions is the lock of every tool of the installation's catalog as
// it is now: each hash and definition. The catalog is the configuration's
// and the binary's: an operator reviews it (usher tools diff, lock) before
// the first start too, so the installation is set up as serve would.
func (e *environment) definitions(ctx context.Context, f *installFlags) (*policy.Lock, error) {
	cfg, log, err := e.loadConfig(f)
	if err != nil {
		return nil, err
	}
	in, err := setUp(ctx, cfg, log, nil)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	cat, err := in.catalog(nil, nil)
	if err != nil {
		return nil, err
	}
	defer cat.Close()
	defs, err := cat.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	tools := make([]policy.ToolDefinition, len(defs))
	for i, d := range defs {
		tools[i] = policy.ToolDefinition(d.ToolDefinition)
	}
	return policy.NewLock(tools)
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
	now, err := e.definitions(ctx, &f)
	if err != nil {
		return err
	}
	current := now.Tools
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
	if err := now.Write(path); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d tools, %d change(s)\n", path, len(current), len(changes))
	return nil
}

// auditCmd runs `usher audit verify|export|rotate-key`.
func (e *environment) auditCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || !slices.Contains([]string{"verify", "export", "rotate-key"}, args[0]) {
		fmt.Fprint(e.stderr, "usage: usher audit verify [--keys FILE] [--anchor SEQ:HASH] | usher audit export [--after SEQ] | usher audit rotate-key\n")
		return errUsage
	}
	var f installFlags
	fs := e.flagSet("audit " + args[0])
	f.register(fs)
	var anchor, keysFile *string
	var after *int64
	switch args[0] {
	case "verify":
		anchor = fs.String("anchor", "", "a head recorded earlier, `SEQ:HASH`: verify also proves nothing before it was cut off or rewritten")
		keysFile = fs.String("keys", "", "a `file` of the audit verifier keys, a copy of /.well-known/usher-audit-key kept elsewhere, to check the checkpoints against (default: the keys in the database)")
	case "export":
		after = fs.Int64("after", 0, "export records after this `seq`")
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if after != nil && *after < 0 {
		fmt.Fprintf(e.stderr, "usher audit export: --after is a sequence number, 0 or more, not %d\n", *after)
		return errUsage
	}
	in, err := e.openInstallation(ctx, &f)
	if err != nil {
		return err
	}
	defer in.Close()
	switch args[0] {
	case "export":
		return audit.Export(ctx, in.store, e.stdout, *after)
	case "rotate-key":
		return e.auditRotateKey(ctx, in)
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
	return e.auditVerify(ctx, in, *keysFile, anchors)
}

// auditVerify runs `usher audit verify`: the chain, its checkpoints and
// anchors.
func (e *environment) auditVerify(ctx context.Context, in *installation, keysFile string, anchors []store.AuditHead) error {
	keys, from, err := in.trustedAuditKeys(ctx, keysFile)
	if err != nil {
		return err
	}
	rep, err := audit.VerifyWithCheckpoints(ctx, in.store, keys, anchors...)
	if err != nil {
		return err
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(e.stdout, p)
	}
	if !rep.Intact() {
		fmt.Fprintf(e.stdout, "audit log BROKEN: %d problem(s) in %d records\n", rep.ProblemCount, rep.Records)
	} else {
		fmt.Fprintf(e.stdout, "audit log intact: %d records, head %d:%s\n", rep.Records, rep.Head.Seq, rep.Head.Hash)
	}
	if last := rep.LastCheckpoint; rep.Checkpoints > 0 {
		fmt.Fprintf(e.stdout, "checkpoints: %d verified with the keys of %s; the last, of %s, names record %d at %s\n",
			rep.Checkpoints, from, last.Origin, last.Seq, last.At.Format(time.RFC3339))
	} else {
		fmt.Fprintf(e.stdout, "checkpoints: none verified with the keys of %s\n", from)
	}
	if !rep.Intact() {
		return errFailed
	}
	return nil
}

// auditRotateKey runs `usher audit rotate-key`: a new audit key signs the
// next checkpoints; the old ones stay published.
func (e *environment) auditRotateKey(ctx context.Context, in *installation) error {
	keys, _, err := in.auditKeys(in.cliURL())
	if err != nil {
		return err
	}
	if err := keys.Rotate(ctx); err != nil {
		return fmt.Errorf("%w (is this the installation's key encryption key?)", err)
	}
	list, err := keys.VerifierKeys(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "the audit key %s signs from now on; %d key(s) published\n", list[0], len(list))
	return nil
}
