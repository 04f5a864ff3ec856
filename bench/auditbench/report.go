package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/usherhq/usher/bench/child"
)

// goal is the most the API may take as a multiple of its SELECT alone.
const goal = 2.0

// report is what one run measured.
type report struct {
	server             string // PostgreSQL's version
	records, rounds    int
	fill               time.Duration
	refilled           string // the kept schema whose log an earlier run filled, if so
	loadStart, loadEnd float64
	queries            []result
	profile            string // the CPU profile's file, if one was taken
	profileQuery       string
	verified           string // what usher audit verify said, with -verify
}

func loadAverage() float64 { return child.LoadAverage() }

func msf(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// print writes the report as a table per query with its plan, then as
// `key value` lines.
func (r report) print(w io.Writer) {
	fmt.Fprintf(w, "\nGET /api/audit as a reviewer, through usher serve over loopback HTTP, against the store's SELECT alone (pgx), PostgreSQL %s\n", r.server)
	if r.refilled != "" {
		fmt.Fprintf(w, "%d records filled by an earlier run (schema %s); load average (1 min): %.2f at the start, %.2f at the end\n\n",
			r.records, r.refilled, r.loadStart, r.loadEnd)
	} else {
		fmt.Fprintf(w, "%d records filled (a valid hash chain, by COPY, then VACUUM ANALYZE) in %.1f s; load average (1 min): %.2f at the start, %.2f at the end\n\n",
			r.records, r.fill.Seconds(), r.loadStart, r.loadEnd)
	}
	if r.verified != "" {
		fmt.Fprintf(w, "usher audit verify: %s\n\n", r.verified)
	}
	if r.profile != "" {
		fmt.Fprintf(w, "CPU profile of Usher over 10 s of the %s query's requests: %s (go tool pprof -top %s)\n\n", r.profileQuery, r.profile, r.profile)
	}
	for _, q := range r.queries {
		verdict := "met"
		if q.ratioP50 > goal {
			verdict = "NOT met"
		}
		fmt.Fprintf(w, "%s: %s, %d records a page — GET %s\n", q.name, q.what, q.rows, q.path)
		fmt.Fprintf(w, "  %d rounds (the request and the SELECT alone, which goes first alternating)   p50 ms    p99 ms\n", r.rounds)
		fmt.Fprintf(w, "    GET /api/audit                                                       %8s  %8s\n", msf(q.apiP50), msf(q.apiP99))
		fmt.Fprintf(w, "    the SELECT alone                                                     %8s  %8s\n", msf(q.aloneP50), msf(q.aloneP99))
		fmt.Fprintf(w, "    GET /api/me in the same rounds (any signed-in request's floor)      %8s\n", msf(q.meP50))
		fmt.Fprintf(w, "    the API as a multiple of the SELECT alone: p50 %.2fx, p99 %.2fx (goal ≤ %.0fx at p50: %s); per round: median %.2fx, +%s ms\n",
			q.ratioP50, q.ratioP99, goal, verdict, q.roundRatio50, msf(q.diffP50))
		fmt.Fprintf(w, "  the store's statement: %s\n", strings.Join(strings.Fields(q.stmt), " "))
		fmt.Fprintf(w, "  its plan:\n")
		for _, l := range q.plan {
			fmt.Fprintf(w, "    %s\n", l)
		}
		fmt.Fprintln(w)
	}
	kv := func(k string, v any) { fmt.Fprintf(w, "%s %v\n", k, v) }
	kv("records", r.records)
	kv("fill_s", fmt.Sprintf("%.1f", r.fill.Seconds()))
	kv("load1_start", fmt.Sprintf("%.2f", r.loadStart))
	kv("load1_end", fmt.Sprintf("%.2f", r.loadEnd))
	kv("rounds", r.rounds)
	if r.profile != "" {
		kv("profile", r.profile)
	}
	for _, q := range r.queries {
		p := strings.ReplaceAll(q.name, "-", "_") + "_"
		kv(p+"rows", q.rows)
		kv(p+"api_p50_ms", msf(q.apiP50))
		kv(p+"api_p99_ms", msf(q.apiP99))
		kv(p+"select_p50_ms", msf(q.aloneP50))
		kv(p+"select_p99_ms", msf(q.aloneP99))
		kv(p+"me_p50_ms", msf(q.meP50))
		kv(p+"ratio_p50", fmt.Sprintf("%.2f", q.ratioP50))
		kv(p+"ratio_p99", fmt.Sprintf("%.2f", q.ratioP99))
		kv(p+"round_ratio_p50", fmt.Sprintf("%.2f", q.roundRatio50))
	}
}
