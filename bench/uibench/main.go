// Command uibench is the benchmark of the Sessions UI on a long
// conversation, in a real headless Chromium against `usher serve` as a
// process of its own (on PostgreSQL when TEST_DATABASE_URL is set, in a
// schema of its own, and on SQLite otherwise).
//
// It signs in through the development provider, creates a session through
// the API, stops Usher and fills the session with -messages messages
// straight through the store (the benchmark's own fast path to a long
// conversation), starts Usher again on the same address, and then, -runs
// times with an empty browser cache and -runs times with the assets
// cached, times the navigation to the conversation until its last message
// is visible, and the scroll to the top until the first page of older
// messages is on the page. It prints the figures; `make bench-ui` runs it,
// and docs/benchmarks.md records them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/usherhq/usher/bench/child"
)

type options struct {
	usher, chromium string
	database        string
	messages, runs  int
	attachments     int
	width, height   int
	keep            bool
}

func main() {
	var o options
	flag.StringVar(&o.usher, "usher", "bin/usher", "the usher binary")
	flag.StringVar(&o.chromium, "chromium", "/usr/bin/chromium", "the Chromium binary")
	flag.StringVar(&o.database, "database", os.Getenv("TEST_DATABASE_URL"), "PostgreSQL server URL (a schema of its own is created and dropped); empty: SQLite")
	flag.IntVar(&o.messages, "messages", 10000, "messages in the conversation (a multiple of 4: turns of a message, a tool call, its result and the answer)")
	flag.IntVar(&o.attachments, "attachments", 200, "user messages that send an image attachment, spread over the conversation")
	flag.IntVar(&o.runs, "runs", 5, "navigations timed with an empty cache, and as many with the assets cached")
	flag.IntVar(&o.width, "width", 1280, "the window's width")
	flag.IntVar(&o.height, "height", 800, "the window's height")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configuration, log, SQLite database)")
	flag.Parse()
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "uibench:", err)
		os.Exit(1)
	}
}

// Goals of the benchmark (the Sessions UI issue's).
const (
	goalVisible = 1000.0 // ms from the navigation to the last message visible
	goalOlder   = 200.0  // ms from the scroll to the first page of history
)

func run(ctx context.Context, o options, out io.Writer) (err error) {
	if o.messages < 4 || o.messages%4 != 0 || o.runs < 1 {
		return fmt.Errorf("-messages must be a positive multiple of 4 and -runs positive")
	}
	dir, err := os.MkdirTemp("", "usher-uibench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "work directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	loadStart := child.LoadAverage()
	engine, dsn := "SQLite", filepath.Join(dir, "data", "usher.db")
	database := ""
	if o.database != "" {
		db, err := openBenchSchema(ctx, o.database)
		if err != nil {
			return err
		}
		defer func() {
			if e := db.close(context.Background()); err == nil {
				err = e
			}
		}()
		engine, dsn = "PostgreSQL", db.url
		database = fmt.Sprintf("database:\n  url: %q\n", db.url)
	}
	cfg := filepath.Join(dir, "usher.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "server:\n  data_dir: %q\n%s", filepath.Join(dir, "data"), database), 0o600); err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	logPath := filepath.Join(dir, "usher.log")
	u, base, err := startUsher(o.usher, cfg, addr, logPath)
	if err != nil {
		return err
	}
	running := u
	defer func() {
		if running != nil {
			if e := running.Stop(); err == nil {
				err = e
			}
		}
	}()

	b, err := startBrowser(o.chromium, o.width, o.height)
	if err != nil {
		return err
	}
	defer b.cancel()
	if err := b.signIn(base, "bench"); err != nil {
		return err
	}
	runID, err := eval[string](b, `fetch("/api/assistant/runs", { method: "POST", headers: { "Content-Type": "application/json" },
		body: JSON.stringify({ title: "A long conversation" }) }).then((r) => r.json()).then((r) => r.runId)`)
	if err != nil || runID == "" {
		return fmt.Errorf("creating the session: %q %v", runID, err)
	}

	// Usher stopped while the store is filled.
	running = nil
	if err := u.Stop(); err != nil {
		return err
	}
	s, err := seedRun(ctx, dsn, runID, o.messages, o.attachments)
	if err != nil {
		return fmt.Errorf("seeding: %w", err)
	}
	if running, _, err = startUsher(o.usher, cfg, addr, logPath); err != nil {
		return err
	}

	if err := b.addProbe(s.lastMessage); err != nil {
		return err
	}
	conv := base + "/runs/" + runID
	var cold, warm []loadResult
	var older []olderResult
	for i := range 2 * o.runs {
		isCold := i%2 == 0 // alternated, so that the machine's load falls on both alike
		l, err := b.load(conv, isCold)
		if err != nil {
			return fmt.Errorf("navigation %d: %w", i+1, err)
		}
		if isCold {
			cold = append(cold, l)
		} else {
			warm = append(warm, l)
		}
		// Let the page settle (the highlighter's lazy load, the live
		// stream) before the reader scrolls up.
		time.Sleep(500 * time.Millisecond)
		r, err := b.scrollUp()
		if err != nil {
			return fmt.Errorf("scroll %d: %w", i+1, err)
		}
		older = append(older, r)
	}
	if err := b.check(); err != nil {
		return err
	}

	fmt.Fprintf(out, "\nSessions UI, a conversation of %d messages (%d events) with %d image attachments, usher on %s, Chromium %dx%d\n", s.messages, s.lastSeq, o.attachments, engine, o.width, o.height)
	fmt.Fprintf(out, "load average (1 min): %.2f at the start, %.2f at the end; seeding took %s\n\n", loadStart, child.LoadAverage(), s.took.Round(time.Millisecond))
	row := func(name string, v []float64, goal float64) {
		fmt.Fprintf(out, "  %-44s median %6.0f ms  max %6.0f ms  (%s)\n", name, median(v), slices.Max(v), verdict(median(v), slices.Max(v), goal))
	}
	pick := func(ls []loadResult, f func(loadResult) float64) []float64 {
		var v []float64
		for _, l := range ls {
			v = append(v, f(l))
		}
		return v
	}
	visible := func(l loadResult) float64 { return l.Visible }
	fmt.Fprintf(out, "navigation to the last message visible (%d each; goal %.0f ms)\n", o.runs, goalVisible)
	row("empty cache", pick(cold, visible), goalVisible)
	row("assets cached", pick(warm, visible), goalVisible)
	for _, c := range []struct {
		name string
		ls   []loadResult
	}{{"empty cache", cold}, {"assets cached", warm}} {
		fmt.Fprintf(out, "  %s, medians: the page's HTML at %.0f ms, DOMContentLoaded (its scripts run) at %.0f ms, the conversation read at %.0f ms\n", c.name,
			median(pick(c.ls, func(l loadResult) float64 { return l.HTML })), median(pick(c.ls, func(l loadResult) float64 { return l.Assets })),
			median(pick(c.ls, func(l loadResult) float64 { return l.RunRead })))
	}
	fmt.Fprintf(out, "  on the page: %d messages, %d elements\n\n", warm[0].Articles, warm[0].Nodes)
	var shown []float64
	var drift float64
	for _, r := range older {
		shown = append(shown, r.Shown)
		drift = max(drift, abs(r.Drift))
	}
	fmt.Fprintf(out, "scroll to the top until the first page of history is on the page (%d; goal %.0f ms)\n", len(older), goalOlder)
	row("first older page", shown, goalOlder)
	fmt.Fprintf(out, "  %d messages a page; the reader's place moved by at most %.1f px\n\n", older[0].Loaded, drift)

	kv := [][2]string{
		{"engine", engine}, {"messages", fmt.Sprint(s.messages)},
		{"visible_cold_p50_ms", fmt.Sprintf("%.0f", median(pick(cold, visible)))},
		{"visible_cold_max_ms", fmt.Sprintf("%.0f", slices.Max(pick(cold, visible)))},
		{"visible_warm_p50_ms", fmt.Sprintf("%.0f", median(pick(warm, visible)))},
		{"visible_warm_max_ms", fmt.Sprintf("%.0f", slices.Max(pick(warm, visible)))},
		{"older_p50_ms", fmt.Sprintf("%.0f", median(shown))},
		{"older_max_ms", fmt.Sprintf("%.0f", slices.Max(shown))},
		{"older_drift_px", fmt.Sprintf("%.1f", drift)},
		{"load1_start", fmt.Sprintf("%.2f", loadStart)},
	}
	var lines []string
	for _, p := range kv {
		lines = append(lines, p[0]+" "+p[1])
	}
	fmt.Fprintln(out, strings.Join(lines, "\n"))
	if drift > 2 {
		return fmt.Errorf("the reader's place moved by %.1f px when the older page came", drift)
	}
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// verdict says how the median, and the slowest, compare with the goal.
func verdict(median, worst, goal float64) string {
	switch {
	case worst <= goal:
		return "goal met, every time"
	case median <= goal:
		return "goal met at the median, not every time"
	default:
		return "goal missed"
	}
}
