package status

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// UsageStore reads what the model requests used, by person.
type UsageStore interface {
	ModelUsageBetween(ctx context.Context, from, to string, limit int) ([]store.ModelUsage, error)
}

// Bounds of a usage report.
const (
	// DefaultUsageDays is the range of a report that names no start: the
	// 30 days that end with its last.
	DefaultUsageDays = 30
	// MaxUsageDays is the longest range a report may cover.
	MaxUsageDays = 366
	// DefaultUsageLimit and MaxUsageLimit bound the rows of a report.
	DefaultUsageLimit = 100
	MaxUsageLimit     = 1000
)

// Usage is what the model requests of each person used over a range of
// days (UTC, inclusive): the body of GET /api/admin/usage and what `usher
// usage -json` prints.
type Usage struct {
	Since string     `json:"since"`
	Until string     `json:"until"`
	Rows  []UsageRow `json:"usage"`
	// More reports rows beyond the limit: a larger limit, or a shorter
	// range, shows them.
	More bool `json:"more"`
}

// UsageRow is one person's requests of one purpose (turn, compaction) to
// one model over the range, the most tokens first: the requests answered
// and the tokens the model server counted.
type UsageRow struct {
	Principal    string `json:"principal"`
	Model        string `json:"model"`
	Purpose      string `json:"purpose"`
	Requests     int64  `json:"requests"`
	InputTokens  int64  `json:"inputTokens"`
	OutputTokens int64  `json:"outputTokens"`
}

// UsageQuery is the range and limit of a report; ParseUsageQuery fills in
// what is left out.
type UsageQuery struct {
	Since, Until string // dates, YYYY-MM-DD
	Limit        int
}

// ParseUsageQuery checks a report's range and limit, as the API's query
// and the command's flags give them ("" or 0: the default): until
// defaults to today's date at now (UTC), since to DefaultUsageDays days
// ending with until, limit to DefaultUsageLimit.
func ParseUsageQuery(since, until string, limit int, now time.Time) (UsageQuery, error) {
	q := UsageQuery{Since: since, Until: until, Limit: limit}
	end, err := parseDay("until", until, now.UTC().Truncate(24*time.Hour))
	if err != nil {
		return q, err
	}
	q.Until = end.Format(time.DateOnly)
	start, err := parseDay("since", since, end.AddDate(0, 0, 1-DefaultUsageDays))
	if err != nil {
		return q, err
	}
	q.Since = start.Format(time.DateOnly)
	switch days := int(end.Sub(start).Hours()/24) + 1; {
	case days < 1:
		return q, fmt.Errorf("until (%s) is before since (%s)", q.Until, q.Since)
	case days > MaxUsageDays:
		return q, fmt.Errorf("the range covers %d days, at most %d", days, MaxUsageDays)
	}
	if q.Limit == 0 {
		q.Limit = DefaultUsageLimit
	}
	if q.Limit < 1 || q.Limit > MaxUsageLimit {
		return q, fmt.Errorf("limit is %d, want 1 to %d", q.Limit, MaxUsageLimit)
	}
	return q, nil
}

// parseDay is the date v names, or def when v is empty.
func parseDay(name, v string, def time.Time) (time.Time, error) {
	if v == "" {
		return def, nil
	}
	t, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return t, fmt.Errorf("%s is %q, want a date YYYY-MM-DD", name, v)
	}
	return t, nil
}

// ReadUsage reads the report q asks for.
func ReadUsage(ctx context.Context, st UsageStore, q UsageQuery) (Usage, error) {
	rows, err := st.ModelUsageBetween(ctx, q.Since, q.Until, q.Limit+1)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Since: q.Since, Until: q.Until, Rows: make([]UsageRow, 0, min(len(rows), q.Limit))}
	if len(rows) > q.Limit {
		rows, u.More = rows[:q.Limit], true
	}
	for _, r := range rows {
		u.Rows = append(u.Rows, UsageRow{Principal: r.Principal, Model: r.Model, Purpose: r.Purpose,
			Requests: r.Requests, InputTokens: r.InputTokens, OutputTokens: r.OutputTokens})
	}
	return u, nil
}

// usage answers GET /api/admin/usage?since=&until=&limit=.
func (a *API) usage(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	for name, values := range query {
		if (name != "since" && name != "until" && name != "limit") || len(values) != 1 {
			httpx.WriteError(w, r, a.log, httpx.Errorf(http.StatusBadRequest, "invalid_usage_query",
				"GET /api/admin/usage takes since, until and limit, once each."))
			return
		}
	}
	limit := 0 // the default
	if v := query.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxUsageLimit {
			httpx.WriteError(w, r, a.log, httpx.Errorf(http.StatusBadRequest, "invalid_usage_query",
				fmt.Sprintf("The query is not valid: limit is %q, want 1 to %d.", v, MaxUsageLimit)))
			return
		}
		limit = n
	}
	q, err := ParseUsageQuery(query.Get("since"), query.Get("until"), limit, a.now())
	if err != nil {
		httpx.WriteError(w, r, a.log, httpx.Errorf(http.StatusBadRequest, "invalid_usage_query", "The query is not valid: "+err.Error()+"."))
		return
	}
	u, err := ReadUsage(r.Context(), a.st, q)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, u)
}
