package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// query is one search of the log as a reviewer sends it: its parameters,
// and the same as the store's query binds them.
type query struct {
	name   string
	what   string // what it selects, for the report
	params url.Values
	bind   binding
}

// binding is what the store's statement compares with, by what each
// parameter stands for (see bindArgs).
type binding struct {
	principal, tool string
	since, until    time.Time
	limit           int
}

// queries are the searches measured: one person of 2,000 newest first
// (the principal index), one tool of 40 (a value that many records hold),
// and an hour in the middle of the log (the time index).
func queries(scope string, records int) []query {
	since := firstAt.Add(time.Duration(records/2) * time.Second).Truncate(time.Hour)
	until := since.Add(time.Hour)
	p := person(scope, 7)
	return []query{
		{
			name: "principal", what: "one person of 2,000, newest first",
			params: url.Values{"principal": {p}, "order": {"desc"}},
			bind:   binding{principal: p, limit: 100},
		},
		{
			name: "tool", what: "one tool of 40",
			params: url.Values{"tool": {"tool-7"}},
			bind:   binding{tool: "tool-7", limit: 100},
		},
		{
			name: "since-until", what: "one hour of the log (since, until)",
			params: url.Values{"since": {since.Format(time.RFC3339)}, "until": {until.Format(time.RFC3339)}},
			bind:   binding{since: since, until: until, limit: 100},
		},
	}
}

// result is what one query measured.
type result struct {
	query
	path         string
	stmt         string   // the store's statement
	rows         int      // the records one page holds
	plan         []string // EXPLAIN (ANALYZE, BUFFERS) of the statement
	api, alone   []time.Duration
	me           []time.Duration // GET /api/me in the same rounds: any request's floor
	meP50        time.Duration
	apiP50       time.Duration
	apiP99       time.Duration
	aloneP50     time.Duration
	aloneP99     time.Duration
	diffP50      time.Duration // median of the per-round differences, API − alone
	ratioP50     float64       // apiP50 / aloneP50
	ratioP99     float64
	roundRatio50 float64 // median of the per-round ratios
}

// measure captures the store's statement of q, checks it returns what the
// API answers, and times both in rounds.
func measure(ctx context.Context, o options, u *usherRun, db *database, q query) (result, error) {
	res := result{query: q, path: "/api/audit?" + q.params.Encode()}
	body, stmt, args, err := capture(ctx, u, db, res.path, q.bind)
	if err != nil {
		return res, err
	}
	res.stmt = stmt
	conn, err := pgx.Connect(ctx, db.alone)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.Background())

	// The SELECT alone returns what the API answered.
	apiSeqs, err := seqsOf(body)
	if err != nil {
		return res, err
	}
	aloneSeqs, err := selectSeqs(ctx, conn, stmt, args)
	if err != nil {
		return res, err
	}
	if !slices.Equal(apiSeqs, aloneSeqs) || len(apiSeqs) == 0 {
		return res, fmt.Errorf("the statement read from pg_stat_activity returns records %v, the API %v (want the same, and some)", head(aloneSeqs), head(apiSeqs))
	}
	res.rows = len(apiSeqs)
	if res.plan, err = explain(ctx, conn, q.name, stmt, args); err != nil {
		return res, err
	}

	alone := func() (time.Duration, error) {
		start := time.Now()
		rows, err := conn.Query(ctx, stmt, args...)
		if err != nil {
			return 0, err
		}
		n := 0
		for rows.Next() {
			_ = rows.RawValues()
			n++
		}
		rows.Close()
		d := time.Since(start)
		if err := rows.Err(); err != nil {
			return 0, err
		}
		if n != res.rows {
			return 0, fmt.Errorf("the SELECT alone returned %d rows, then %d", res.rows, n)
		}
		return d, nil
	}
	api := func() (time.Duration, error) {
		start := time.Now()
		b, err := u.get(ctx, res.path)
		d := time.Since(start)
		if err != nil {
			return 0, err
		}
		if len(b) < 100 {
			return 0, fmt.Errorf("the API answered %q", b)
		}
		return d, nil
	}
	me := func() (time.Duration, error) {
		start := time.Now()
		_, err := u.get(ctx, "/api/me")
		return time.Since(start), err
	}
	for round := range o.warmup + o.rounds {
		first, second := api, alone
		if round%2 == 1 {
			first, second = alone, api
		}
		d1, err := first()
		if err != nil {
			return res, err
		}
		d2, err := second()
		if err != nil {
			return res, err
		}
		d3, err := me()
		if err != nil {
			return res, err
		}
		if round < o.warmup {
			continue
		}
		if round%2 == 1 {
			d1, d2 = d2, d1
		}
		res.api, res.alone, res.me = append(res.api, d1), append(res.alone, d2), append(res.me, d3)
	}
	res.meP50 = percentile(res.me, 0.5)
	if o.profile != "" && o.profileQuery == q.name {
		if err := u.profile(ctx, 10*time.Second, o.profile, func() error { _, err := api(); return err }); err != nil {
			return res, fmt.Errorf("CPU profile: %w", err)
		}
	}
	res.apiP50, res.apiP99 = percentile(res.api, 0.5), percentile(res.api, 0.99)
	res.aloneP50, res.aloneP99 = percentile(res.alone, 0.5), percentile(res.alone, 0.99)
	diffs, ratios := make([]time.Duration, len(res.api)), make([]time.Duration, len(res.api))
	for i := range res.api {
		diffs[i] = res.api[i] - res.alone[i]
		// A ratio as a Duration of 1/1000ths, for percentile.
		ratios[i] = time.Duration(1000 * float64(res.api[i]) / float64(max(res.alone[i], 1)))
	}
	res.diffP50 = percentile(diffs, 0.5)
	res.roundRatio50 = float64(percentile(ratios, 0.5)) / 1000
	res.ratioP50 = float64(res.apiP50) / float64(res.aloneP50)
	res.ratioP99 = float64(res.apiP99) / float64(res.aloneP99)
	return res, nil
}

// storeSelect is how the store's audit search begins (store/auditquery.go).
const storeSelect = "FROM audit_log WHERE seq > $1"

// capture requests path as the reviewer and reads the statement that
// answered it from pg_stat_activity: the last statement of the Usher
// backend that ran it, the one of the store's audit search whose filters
// are b's (another backend may still show an earlier search). Another
// statement may take that backend first (a sweep, a checkpoint): then it
// asks again, at most 20 times. It returns the answer, the statement and
// its arguments.
func capture(ctx context.Context, u *usherRun, db *database, path string, b binding) ([]byte, string, []any, error) {
	var last error
	for range 20 {
		body, err := u.get(ctx, path)
		if err != nil {
			return nil, "", nil, err
		}
		stmts, err := db.usherStatements(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		for _, s := range stmts {
			if !strings.Contains(s, storeSelect) {
				continue
			}
			args, err := bindArgs(s, b, u.scope)
			if err == nil {
				return body, s, args, nil
			}
			last = err
		}
	}
	return nil, "", nil, fmt.Errorf("no statement of Usher's backends is the store's audit search (%q) with this query's filters after 20 requests; the last one seen: %v", storeSelect, last)
}

// placeholders find what each parameter of the store's statement stands
// for, as store/auditquery.go writes them.
var placeholders = []struct {
	re   *regexp.Regexp
	name string
}{
	{regexp.MustCompile(`\bseq > \$(\d+)`), "after"},
	{regexp.MustCompile(`\bseq < \$(\d+)`), "before"},
	{regexp.MustCompile(`length\(\$(\d+)::text\)`), "scope"},
	{regexp.MustCompile(`\bprincipal = \$(\d+)`), "principal"},
	{regexp.MustCompile(`\btool = \$(\d+)`), "tool"},
	{regexp.MustCompile(`\bkind = \$(\d+)`), "kind"},
	{regexp.MustCompile(`\boutcome = \$(\d+)`), "outcome"},
	{regexp.MustCompile(`'server' = \$(\d+)`), "server"},
	{regexp.MustCompile(`\bat >= \$(\d+)`), "since"},
	{regexp.MustCompile(`\bat < \$(\d+)`), "until"},
	{regexp.MustCompile(`LIMIT \$(\d+)`), "limit"},
}

// bindArgs binds the parameters of the store's statement as the API binds
// them for b and the reviewer's scope. A parameter it cannot place is an
// error: the store's query changed, and the benchmark with it.
func bindArgs(stmt string, b binding, scope string) ([]any, error) {
	values := map[string]any{"after": int64(0), "scope": scope, "limit": b.limit}
	if b.principal != "" {
		values["principal"] = b.principal
	}
	if b.tool != "" {
		values["tool"] = b.tool
	}
	if !b.since.IsZero() {
		values["since"], values["until"] = b.since, b.until
	}
	args := map[int]any{}
	placed := map[string]bool{}
	for _, p := range placeholders {
		m := p.re.FindStringSubmatch(stmt)
		if m == nil {
			continue
		}
		v, ok := values[p.name]
		if !ok {
			return nil, fmt.Errorf("the store's statement filters by %s, which this query does not: %s", p.name, stmt)
		}
		i, _ := strconv.Atoi(m[1])
		args[i] = v
		placed[p.name] = true
	}
	for name := range values {
		if !placed[name] && name != "after" {
			return nil, fmt.Errorf("the statement does not filter by %s, which this query does: %s", name, stmt)
		}
	}
	out := make([]any, len(args))
	for i := range out {
		v, ok := args[i+1]
		if !ok {
			return nil, fmt.Errorf("the store's statement has a parameter $%d this benchmark cannot place: %s", i+1, stmt)
		}
		out[i] = v
	}
	if strings.Contains(stmt, "$"+strconv.Itoa(len(out)+1)) {
		return nil, fmt.Errorf("the store's statement has more parameters than this benchmark can place: %s", stmt)
	}
	return out, nil
}

// seqsOf is the sequence numbers of the records of a GET /api/audit answer.
func seqsOf(body []byte) ([]int64, error) {
	var page struct {
		Records []struct {
			Seq int64 `json:"seq"`
		} `json:"records"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("the API's answer: %w", err)
	}
	out := make([]int64, len(page.Records))
	for i, r := range page.Records {
		out[i] = r.Seq
	}
	return out, nil
}

// selectSeqs runs the statement and returns the rows' seq (its first
// column).
func selectSeqs(ctx context.Context, conn *pgx.Conn, stmt string, args []any) ([]int64, error) {
	rows, err := conn.Query(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("the store's statement alone: %w", err)
	}
	var out []int64
	for rows.Next() {
		var seq int64
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		switch v := vals[0].(type) {
		case int64:
			seq = v
		default:
			return nil, fmt.Errorf("the statement's first column is %T, not seq", vals[0])
		}
		out = append(out, seq)
	}
	return out, rows.Err()
}

// explain is the plan of the statement with its arguments as it runs in
// the rounds: prepared, as pgx prepares it on both sides (its statement
// cache), and run ten times first, after which PostgreSQL may keep a
// generic plan for it rather than plan each run for its values. The
// arguments are written into the EXECUTE by pgx's simple protocol, which
// quotes them.
func explain(ctx context.Context, conn *pgx.Conn, name, stmt string, args []any) ([]string, error) {
	name = "auditbench_" + strings.ReplaceAll(name, "-", "_")
	if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+stmt); err != nil {
		return nil, fmt.Errorf("PREPARE: %w", err)
	}
	params := make([]string, len(args))
	for i := range args {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	execute := "EXECUTE " + name + "(" + strings.Join(params, ", ") + ")"
	simple := append([]any{pgx.QueryExecModeSimpleProtocol}, args...)
	for range 10 {
		if _, err := conn.Exec(ctx, execute, simple...); err != nil {
			return nil, fmt.Errorf("EXECUTE: %w", err)
		}
	}
	rows, err := conn.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+execute, simple...)
	if err != nil {
		return nil, fmt.Errorf("EXPLAIN: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// head is the first few of seqs, for an error message.
func head(seqs []int64) []int64 { return seqs[:min(len(seqs), 5)] }

// percentile is the q-quantile of ds by the nearest-rank method.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// readAll reads a response's body.
func readAll(resp *http.Response) ([]byte, error) { return io.ReadAll(resp.Body) }
