package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/usherhq/usher/privacy"
	"github.com/usherhq/usher/store"
)

// holdUsage is the usage of `usher hold`.
const holdUsage = "usage: usher hold place PRINCIPAL --reason TEXT [--by NAME] | usher hold lift PRINCIPAL [--by NAME] | usher hold list [-json] [flags]\n"

// holdCmd runs `usher hold place|lift|list`: legal holds on people's data
// (package privacy), each placement and lift audited.
func (e *environment) holdCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || !slices.Contains([]string{"place", "lift", "list"}, args[0]) {
		fmt.Fprint(e.stderr, holdUsage)
		return errUsage
	}
	if args[0] == "list" {
		return e.listHolds(ctx, args[1:])
	}
	var reason, by *string
	usage := "[--by NAME]"
	if args[0] == "place" {
		usage = "--reason TEXT [--by NAME]"
	}
	p, err := e.openForPerson(ctx, "hold "+args[0], usage, args[1:], func(fs *flag.FlagSet) {
		if args[0] == "place" {
			reason = fs.String("reason", "", "why the person's data is kept: the `matter`'s name or number (required)")
		}
		by = fs.String("by", "usher hold", "who places or lifts the hold, for the audit record")
	})
	if err != nil {
		return err
	}
	defer p.in.Close()
	if strings.TrimSpace(*by) == "" {
		fmt.Fprintf(e.stderr, "usher hold %s: --by must name who %s the hold\n%s", args[0], map[string]string{"place": "places", "lift": "lifts"}[args[0]], holdUsage)
		return errUsage
	}
	if args[0] == "lift" {
		h, err := privacy.LiftHold(ctx, p.in.store, p.log, p.principal, *by)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%s is under no legal hold (see usher hold list)", terminalSafe(p.principal, 0))
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "lifted the legal hold on %s (%s, placed %s by %s): the retention policy applies to their data again\n",
			terminalSafe(h.Principal, 0), terminalSafe(h.Reason, 120), day(h.PlacedAt), terminalSafe(h.PlacedBy, 64))
		return nil
	}
	if strings.TrimSpace(*reason) == "" {
		fmt.Fprint(e.stderr, "usher hold place: --reason is required: the matter's name or number\n"+holdUsage)
		return errUsage
	}
	return e.placeHold(ctx, p, *reason, *by)
}

// placeHold places the hold, or gives it the new reason, and says which;
// with a note when Usher keeps nothing of the person yet.
func (e *environment) placeHold(ctx context.Context, p personCommand, reason, by string) error {
	known, err := privacy.Known(ctx, p.in.store, p.principal)
	if err != nil {
		return err
	}
	before, err := p.in.store.LegalHolds(ctx)
	if err != nil {
		return err
	}
	h, err := privacy.PlaceHold(ctx, p.in.store, p.log, p.principal, reason, by)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(before, func(b store.LegalHold) bool { return b.Principal == h.Principal }) {
		fmt.Fprintf(e.stdout, "the legal hold on %s (placed %s by %s) now has the reason %s\n",
			terminalSafe(h.Principal, 0), day(h.PlacedAt), terminalSafe(h.PlacedBy, 64), terminalSafe(h.Reason, 120))
	} else {
		fmt.Fprintf(e.stdout, "placed a legal hold on %s (%s): nothing erases their data until it is lifted\n",
			terminalSafe(h.Principal, 0), terminalSafe(h.Reason, 120))
	}
	if !known {
		fmt.Fprintf(e.stderr, "note: Usher keeps nothing of %s yet: the hold keeps what they do from now on; if you meant someone who used Usher, check the id %s\n",
			terminalSafe(h.Principal, 0), principalSource)
	}
	return nil
}

// listHolds prints the legal holds that stand, the oldest first.
func (e *environment) listHolds(ctx context.Context, args []string) error {
	var f installFlags
	fs := e.flagSet("hold list")
	f.register(fs)
	asJSON := fs.Bool("json", false, "print the holds as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fmt.Fprint(e.stderr, holdUsage)
		return errUsage
	}
	in, err := e.openInstallation(ctx, &f)
	if err != nil {
		return err
	}
	defer in.Close()
	holds, err := in.store.LegalHolds(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(append([]store.LegalHold{}, holds...))
	}
	if len(holds) == 0 {
		fmt.Fprintln(e.stdout, "no legal holds")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tPLACED\tBY\tREASON")
	for _, h := range holds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", terminalSafe(h.Principal, 0), day(h.PlacedAt), terminalSafe(h.PlacedBy, 64), terminalSafe(h.Reason, 120))
	}
	return tw.Flush()
}
