package status

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// WriteText writes rep for a person at a terminal: a summary line and the
// problems first, then the replicas, the upstreams, the queue, the
// approvals and the audit checkpoint.
func WriteText(w io.Writer, rep Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	down := 0
	for _, u := range rep.Upstreams {
		if u.State == StateDown {
			down++
		}
	}
	p("Usher at %s: %d replica%s alive, %d of %d upstream%s down, %d run%s queued, %d approval%s pending\n",
		rep.At.Format(time.DateTime+" MST"), len(rep.Replicas), plural(len(rep.Replicas)), down, len(rep.Upstreams), plural(len(rep.Upstreams)),
		rep.Queue.Queued, plural(int(rep.Queue.Queued)), rep.Approvals.Pending, plural(int(rep.Approvals.Pending)))
	if len(rep.Problems) > 0 {
		p("\nPROBLEMS\n")
		for _, pr := range rep.Problems {
			p("  %s\n", pr)
		}
	}

	p("\nREPLICA\tVERSION\tADDRESS\tSTARTED\tLAST SEEN\n")
	for _, r := range rep.Replicas {
		p("%s\t%s\t%s\t%s ago\t%s ago\n", r.ID, r.Version, cmp.Or(r.Addr, "-"), since(rep.At, r.StartedAt), since(rep.At, r.LastSeen))
	}
	if len(rep.Replicas) == 0 {
		p("(none)\n")
	}

	p("\nUPSTREAM\tSTATE\tLAST OK\tREPLICAS\tERROR\n")
	for _, u := range rep.Upstreams {
		lastOK := "-"
		if !u.LastOK.IsZero() {
			lastOK = since(rep.At, u.LastOK) + " ago"
		}
		counts := map[string]int{}
		for _, v := range u.Replicas {
			counts[v.State]++
		}
		var views []string
		for _, s := range []string{StateUp, StateDown, StateUnknown} {
			if counts[s] > 0 {
				views = append(views, fmt.Sprintf("%d %s", counts[s], s))
			}
		}
		p("%s\t%s\t%s\t%s\t%s\n", u.Name, u.State, lastOK, strings.Join(views, ", "), cmp.Or(oneLine(u.Error), "-"))
	}
	if len(rep.Upstreams) == 0 {
		p("(none)\n")
	}

	p("\n")
	oldest := "-"
	if !rep.Queue.OldestQueuedAt.IsZero() {
		oldest = since(rep.At, rep.Queue.OldestQueuedAt) + " ago"
	}
	p("QUEUE\t%d queued, %d running, oldest queued %s\n", rep.Queue.Queued, rep.Queue.Running, oldest)
	if o := rep.Approvals.Oldest; o != nil {
		tool := o.Tool
		if o.Server != "" {
			tool += " (" + o.Server + ")"
		}
		p("APPROVALS\t%d pending, oldest %s ago: %s\n", rep.Approvals.Pending, since(rep.At, o.RequestedAt), tool)
	} else {
		p("APPROVALS\t%d pending\n", rep.Approvals.Pending)
	}
	if c := rep.Checkpoint; c != nil {
		p("AUDIT\tlast checkpoint at seq %d, %s ago (%s)\n", c.Seq, since(rep.At, c.At), c.At.UTC().Format(time.DateTime+" MST"))
	} else {
		p("AUDIT\tno checkpoint signed yet\n")
	}
	return tw.Flush()
}

// since is how long before now t was, rounded for reading.
func since(now, t time.Time) string {
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Minute:
		return d.Truncate(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Truncate(time.Second).String()
	default:
		return d.Truncate(time.Minute).String()
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// oneLine keeps a table row one line: an error's newlines and tabs become
// spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// WriteUsageText writes u for a person at a terminal: a line naming the
// range, then a table, the most tokens first.
func WriteUsageText(w io.Writer, u Usage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	var requests, in, out int64
	for _, r := range u.Rows {
		requests, in, out = requests+r.Requests, in+r.InputTokens, out+r.OutputTokens
	}
	p("Model usage %s to %s (UTC): %d request%s, %d input and %d output tokens in the rows below\n\n",
		u.Since, u.Until, requests, plural(int(requests)), in, out)
	p("PRINCIPAL\tMODEL\tPURPOSE\tREQUESTS\tINPUT TOKENS\tOUTPUT TOKENS\n")
	for _, r := range u.Rows {
		p("%s\t%s\t%s\t%d\t%d\t%d\n", shown(r.Principal), shown(r.Model), r.Purpose,
			r.Requests, r.InputTokens, r.OutputTokens)
	}
	if len(u.Rows) == 0 {
		p("(none)\n")
	}
	if u.More {
		p("\n(more rows: ask for a larger --limit, up to %d, or a shorter range)\n", MaxUsageLimit)
	}
	return tw.Flush()
}

// shown is s as a table shows it: itself when every rune is graphic (no
// tab, newline or escape sequence can move the terminal), else quoted.
func shown(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) }) < 0 {
		return s
	}
	return strconv.QuoteToGraphic(s)
}
