package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"unicode"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/privacy"
	"github.com/usherhq/usher/store"
)

// eraseCmd runs `usher erase PRINCIPAL [--yes]`: everything Usher keeps
// of a person but the audit log, erased and audited (package privacy);
// without --yes, only what would be erased.
func (e *environment) eraseCmd(ctx context.Context, args []string) error {
	var yes *bool
	p, err := e.openForPerson(ctx, "erase", "[--yes]", args, func(fs *flag.FlagSet) {
		yes = fs.Bool("yes", false, "erase; without it, print what would be erased and change nothing")
	})
	if err != nil {
		return err
	}
	defer p.in.Close()
	out, err := privacy.Erase(ctx, p.in.store, p.log, p.principal, "usher erase", !*yes)
	if errors.Is(err, store.ErrLegalHold) {
		return fmt.Errorf("%s is under a legal hold (usher hold list): nothing was erased; the hold must be lifted first (usher hold lift)", terminalSafe(p.principal, 0))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: ", terminalSafe(p.principal, 0))
	if err := privacy.WriteText(e.stdout, out, !*yes); err != nil {
		return err
	}
	if out.Principal = ""; out == (store.PrincipalErasure{}) {
		fmt.Fprintf(e.stderr, "note: Usher keeps nothing of %s: if you meant someone who used Usher, check the id %s\n",
			terminalSafe(p.principal, 0), principalSource)
	}
	if !*yes {
		fmt.Fprintln(e.stdout, "nothing was changed: run again with --yes to erase (disable the person at the identity provider first, or they can sign in again)")
	}
	return nil
}

// personCommand is an opened installation, its audit log, and the
// principal a command about one person (erase, export) names.
type personCommand struct {
	in        *installation
	log       *audit.Log
	principal string
}

// openForPerson parses `usher NAME PRINCIPAL USAGE [flags]`, with the
// command's own flags (flags registers them), and opens the installation;
// the caller closes p.in.
func (e *environment) openForPerson(ctx context.Context, name, usage string, args []string, flags func(*flag.FlagSet)) (personCommand, error) {
	var f installFlags
	fs := e.flagSet(name)
	f.register(fs)
	flags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return personCommand{}, err
	}
	if len(pos) != 1 || pos[0] == "" {
		fmt.Fprintf(e.stderr, "usage: usher %s PRINCIPAL %s [flags]\n  PRINCIPAL: the person's id %s\n", name, usage, principalSource)
		return personCommand{}, errUsage
	}
	if why := notAnID(pos[0]); why != "" {
		fmt.Fprintf(e.stderr, "usher %s: PRINCIPAL %q %s: a principal id has none (give the id %s)\n", name, pos[0], why, principalSource)
		return personCommand{}, errUsage
	}
	in, err := e.openInstallation(ctx, &f)
	if err != nil {
		return personCommand{}, err
	}
	log, err := audit.New(in.store, nil)
	if err != nil {
		in.Close()
		return personCommand{}, err
	}
	return personCommand{in: in, log: log, principal: pos[0]}, nil
}

// principalSource says where a person's principal id is found.
const principalSource = "as GET /api/me, usher usage and the audit log give it"

// notAnID says what in s no principal id has (spaces at its ends, a
// character that is not printable), or "" when nothing.
func notAnID(s string) string {
	if strings.TrimSpace(s) != s {
		return "has spaces at its ends"
	}
	if !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return ""
	}
	return "holds a character that is not printable"
}
