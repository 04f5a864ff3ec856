package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/jcs"
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
		fmt.Fprint(e.stderr, "usage: usher tools diff [--lock FILE] [-json] | usher tools lock [--lock FILE] [--expect DIGEST]\n")
		return errUsage
	}
	var f installFlags
	fs := e.flagSet("tools " + args[0])
	f.register(fs)
	lockFile := fs.String("lock", "", "tool lock `file` (default: policy.lock_file)")
	var asJSON *bool
	var expect *string
	if args[0] == "diff" {
		asJSON = fs.Bool("json", false, "print the review as JSON: the digest, and each change with its definitions")
	} else {
		expect = fs.String("expect", "", "the review `digest` `usher tools diff` printed: lock only if the tools offered now are the ones reviewed")
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cfg, _, err := e.loadConfig(&f)
	if err != nil {
		return err
	}
	path := cmp.Or(*lockFile, cfg.Policy.LockFile)
	now, err := e.definitions(ctx, &f)
	if err != nil {
		return err
	}
	lock, err := policy.ReadLock(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	rev, err := newReview(lock, now)
	if err != nil {
		return err
	}
	if args[0] == "diff" {
		return e.toolsDiff(path, rev, *asJSON)
	}
	return e.toolsLock(path, rev, now, *expect)
}

// toolsDiff prints a review of the tools offered now against the lock at
// path; it fails when they differ.
func (e *environment) toolsDiff(path string, rev *toolReview, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rev); err != nil {
			return err
		}
	} else {
		rev.print(e.stdout, path)
	}
	if len(rev.Changes) > 0 {
		return errFailed
	}
	return nil
}

// toolsLock writes now to path, after checking that it is what was
// reviewed (expect, when given).
func (e *environment) toolsLock(path string, rev *toolReview, now *policy.Lock, expect string) error {
	if expect != "" && expect != rev.Digest {
		fmt.Fprintf(e.stdout, "not locked: the tools offered now (review digest %s) are not the ones reviewed (%s).\n", rev.Digest, expect)
		fmt.Fprintf(e.stdout, "An upstream changed since the review. What is offered now, against %s:\n", path)
		for _, c := range rev.Changes {
			fmt.Fprintln(e.stdout, c.Change)
		}
		fmt.Fprintln(e.stdout, "Review it again with `usher tools diff`, then lock with the digest it prints.")
		return errFailed
	}
	for _, c := range rev.Changes {
		fmt.Fprintln(e.stdout, c.Change)
	}
	if err := now.Write(path); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d tools, %d change(s), review digest %s\n", path, len(now.Tools), len(rev.Changes), rev.Digest)
	if expect == "" {
		fmt.Fprintln(e.stdout, "locked without --expect: what the upstreams offered at this moment, reviewed or not; pass the digest `usher tools diff` printed to lock only what was reviewed")
	}
	fmt.Fprintln(e.stdout, "a running `usher serve` reads the lock at its start: restart it (each replica, a rolling restart) to apply this one")
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

// toolReview is what `usher tools diff` shows a reviewer: how the tools
// offered now differ from the lock, with their definitions, and the
// digest of every tool offered now, which `usher tools lock --expect`
// compares so that it locks only what was reviewed.
type toolReview struct {
	// Digest is "sha256:" and the hex SHA-256 of the RFC 8785 canonical
	// JSON of the tools a lock written now would hold (its "tools"
	// member: each name and definition hash).
	Digest  string         `json:"digest"`
	Tools   int            `json:"tools"`
	Changes []reviewChange `json:"changes"`
}

// reviewChange is one change with the definitions behind it.
type reviewChange struct {
	policy.Change `json:"-"`
	Tool          string            `json:"tool"`
	Kind          policy.ChangeKind `json:"kind"`
	LockedHash    string            `json:"locked_hash,omitempty"`
	Hash          string            `json:"hash,omitempty"`
	// Definition is the one offered now; LockedDefinition the one the
	// lock keeps, when it keeps it.
	Definition       *policy.ToolDefinition `json:"definition,omitempty"`
	LockedDefinition *policy.ToolDefinition `json:"locked_definition,omitempty"`
}

// newReview compares now, a lock of every tool offered now, with lock
// (nil: none).
func newReview(lock, now *policy.Lock) (*toolReview, error) {
	canonical, err := jcs.Marshal(now.Tools)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(canonical)
	rev := &toolReview{Digest: "sha256:" + hex.EncodeToString(sum[:]), Tools: len(now.Tools), Changes: []reviewChange{}}
	for _, c := range policy.Diff(lock, now.Tools) {
		rc := reviewChange{Change: c, Tool: c.Tool, Kind: c.Kind, LockedHash: c.Old, Hash: c.New}
		if d, ok := now.Definitions[c.Tool]; ok && c.Kind != policy.Removed {
			rc.Definition = &d
		}
		if lock != nil && c.Kind != policy.Added {
			if d, ok := lock.Definitions[c.Tool]; ok {
				rc.LockedDefinition = &d
			}
		}
		rev.Changes = append(rev.Changes, rc)
	}
	return rev, nil
}

// print writes the review as text: each change, the definitions to read
// before locking, and the digest to lock them with.
func (r *toolReview) print(w io.Writer, path string) {
	for _, c := range r.Changes {
		fmt.Fprintln(w, c.Change)
		for _, d := range []struct {
			label string
			def   *policy.ToolDefinition
		}{{"locked: ", c.LockedDefinition}, {"offered:", c.Definition}} {
			if d.def != nil {
				b, _ := json.MarshalIndent(d.def, "      ", "  ")
				fmt.Fprintf(w, "    %s %s\n", d.label, b)
			}
		}
	}
	if len(r.Changes) == 0 {
		fmt.Fprintf(w, "%s matches all %d tools\n", path, r.Tools)
	}
	fmt.Fprintf(w, "review digest %s: `usher tools lock --expect %s` locks these %d tools only if they are still what is offered\n", r.Digest, r.Digest, r.Tools)
}
