package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/status"
)

// statusView records this replica's heartbeat every
// admin.heartbeat_interval, under the id its runs' leases take, and mounts
// the admins' status API, for signed-in admins only: a broker token is
// refused, and the API's verifier refuses an application's own token. The
// heartbeat stops, taking the replica off the list, before the store
// closes.
func (s *serving) statusView(ctx context.Context) error {
	s.upstreams = &status.CheckedUpstreams{}
	for _, u := range s.cfg.MCP.Upstreams {
		s.upstreams.Configured = append(s.upstreams.Configured, u.Name)
	}
	hb, err := status.NewHeartbeat(s.in.store, &status.HeartbeatOptions{
		Addr: s.ln.Addr().String(), Interval: s.cfg.Admin.HeartbeatInterval.Std(), Upstreams: s.upstreams,
		Alone:      s.cfg.EmbeddedDatabase(),
		Registerer: s.reg, Logger: s.log.With("component", "status"),
	})
	if err != nil {
		return err
	}
	if err := hb.Start(ctx); err != nil {
		return err
	}
	s.onStop(hb.Stop)
	s.in.replicaID = hb.ID()
	s.in.earlierIncarnation = hb.EarlierIncarnation
	api, err := status.NewAPI(s.in.store, &status.APIOptions{Admins: s.cfg.Admin.Groups, Logger: s.log.With("component", "status")})
	if err != nil {
		return err
	}
	h := broker.RefuseTokens(s.publicURL, s.authenticated(api.Handler()))
	for _, p := range status.Paths {
		s.mux.Handle(p, h)
		s.mux.Handle(p+"/", h)
	}
	return nil
}

// statusCmd runs `usher status`: the status of the installation, read
// from its database, as a table or (-json) as GET /api/admin/status
// answers it. It exits 1 when the report names a problem.
func (e *environment) statusCmd(ctx context.Context, args []string) error {
	var f installFlags
	fs := e.flagSet("status")
	f.register(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	in, err := e.openInstallation(ctx, &f)
	if err != nil {
		return err
	}
	defer in.Close()
	rep, err := status.Read(ctx, in.store, time.Now())
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = status.WriteText(e.stdout, rep)
	}
	if err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return errFailed
	}
	return nil
}

// usageCmd runs `usher usage`: what each person's model requests used
// over a range of days, read from the database, as a table or (-json) as
// GET /api/admin/usage answers it.
func (e *environment) usageCmd(ctx context.Context, args []string) error {
	var f installFlags
	fs := e.flagSet("usage")
	f.register(fs)
	since := fs.String("since", "", "the first `day`, YYYY-MM-DD (UTC); default: the 30 days that end with --until")
	until := fs.String("until", "", "the last `day`, YYYY-MM-DD (UTC); default: today")
	limit := fs.Int("limit", status.DefaultUsageLimit, "at most this many rows (1 to 1000)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	q, err := status.ParseUsageQuery(*since, *until, *limit, time.Now())
	if err != nil {
		fmt.Fprintf(e.stderr, "usher usage: %v\n", err)
		return errUsage
	}
	in, err := e.openInstallation(ctx, &f)
	if err != nil {
		return err
	}
	defer in.Close()
	u, err := status.ReadUsage(ctx, in.store, q)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(u)
	}
	return status.WriteUsageText(e.stdout, u)
}
