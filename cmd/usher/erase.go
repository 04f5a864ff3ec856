package main

import (
	"context"
	"fmt"

	"github.com/usherhq/usher/erasure"
	"github.com/usherhq/usher/internal/audit"
)

// eraseCmd runs `usher erase PRINCIPAL [--yes]`: everything Usher keeps
// of a person but the audit log, erased and audited (package erasure);
// without --yes, only what would be erased.
func (e *environment) eraseCmd(ctx context.Context, args []string) error {
	var f installFlags
	fs := e.flagSet("erase")
	f.register(fs)
	yes := fs.Bool("yes", false, "erase; without it, print what would be erased and change nothing")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		fmt.Fprint(e.stderr, "usage: usher erase PRINCIPAL [--yes] [flags]\n  PRINCIPAL: the person's id as GET /api/me, usher usage and the audit log give it\n")
		return errUsage
	}
	in, err := e.openInstallation(ctx, &f)
	if err != nil {
		return err
	}
	defer in.Close()
	log, err := audit.New(in.store, nil)
	if err != nil {
		return err
	}
	out, err := erasure.Erase(ctx, in.store, log, pos[0], "usher erase", !*yes)
	if err != nil {
		return err
	}
	if err := erasure.WriteText(e.stdout, out, !*yes); err != nil {
		return err
	}
	if !*yes {
		fmt.Fprintln(e.stdout, "nothing was changed: run again with --yes to erase (disable the person at the identity provider first, or they can sign in again)")
	}
	return nil
}
