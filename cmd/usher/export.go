package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/usherhq/usher/privacy"
)

// exportCmd runs `usher export PRINCIPAL [--output FILE]`: everything
// Usher keeps of a person, as JSON, recorded in the audit log first
// (package privacy). A file is created for it alone (never overwritten),
// readable by its owner only, and removed if the export fails.
func (e *environment) exportCmd(ctx context.Context, args []string) error {
	var output *string
	p, err := e.openForPerson(ctx, "export", "[--output FILE]", args, func(fs *flag.FlagSet) {
		output = fs.String("output", "", "write to this new `file` (0600) instead of standard output")
	})
	if err != nil {
		return err
	}
	defer p.in.Close()
	known, err := privacy.Known(ctx, p.in.store, p.principal)
	if err != nil {
		return err
	}
	w, done := io.Writer(e.stdout), func(error) error { return nil }
	if *output != "" {
		file, err := os.OpenFile(*output, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		w, done = file, func(failed error) error {
			err := errors.Join(file.Sync(), file.Close())
			if failed != nil || err != nil {
				return errors.Join(err, os.Remove(*output))
			}
			return nil
		}
	}
	counts, err := privacy.Export(ctx, p.in.store, p.log, p.principal, "usher export", w)
	if cerr := done(err); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if *output != "" {
		n := 0
		for _, c := range counts {
			n += c
		}
		fmt.Fprintf(e.stderr, "wrote %d rows of %d tables to %s\n", n, len(counts), *output)
	}
	if !known {
		fmt.Fprintf(e.stderr, "note: Usher keeps nothing of %s but the record of this export: if you meant someone who used Usher, check the id %s\n",
			terminalSafe(p.principal, 0), principalSource)
	}
	return nil
}
