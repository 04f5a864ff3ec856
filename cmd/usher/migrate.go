package main

import (
	"context"
	"fmt"
)

// migrate applies pending migrations to the installation's database
// (setUp does it), making the installation if there is none, and reports
// readiness.
func (e *environment) migrate(ctx context.Context, args []string) error {
	var f installFlags
	fs := e.flagSet("migrate")
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, log, err := e.loadConfig(&f)
	if err != nil {
		return err
	}
	in, err := setUp(ctx, cfg, log, nil)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := in.store.Ready(ctx); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "database (%s) is at the newest schema\n", in.engine())
	return nil
}
