package main

import (
	"context"
	"fmt"
)

// migrate applies pending migrations to the installation's database (open
// does it) and reports readiness.
func (e *environment) migrate(ctx context.Context, args []string) error {
	var f installFlags
	fs := e.flagSet("migrate")
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	in, err := e.openInstallation(ctx, &f)
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
