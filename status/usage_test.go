package status_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/status"
	"github.com/usherhq/usher/store"
)

// TestUsageAPI reads what each person's model requests used through GET
// /api/admin/usage: the default range (the 30 days ending today), a
// range and limit of the admin's choosing with more rows left, and every
// bad query refused, a non-admin refused.
func TestUsageAPI(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	now := time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC)
	for _, u := range []store.ModelUsage{
		{Principal: "i|t|alice", Day: "2026-12-07", Model: "m", Purpose: "turn", Requests: 3, InputTokens: 300, OutputTokens: 30},
		{Principal: "i|t|alice", Day: "2026-11-08", Model: "m", Purpose: "turn", Requests: 1, InputTokens: 100, OutputTokens: 10},
		{Principal: "i|t|alice", Day: "2026-11-07", Model: "m", Purpose: "turn", Requests: 50, InputTokens: 5000, OutputTokens: 500},
		{Principal: "i|t|bob", Day: "2026-12-01", Model: "m", Purpose: "compaction", Requests: 1, InputTokens: 2000, OutputTokens: 200},
	} {
		if err := st.AddModelUsage(t.Context(), u); err != nil {
			t.Fatal(err)
		}
	}
	api, err := status.NewAPI(st, &status.APIOptions{Admins: status.Admins{"operators"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	h := api.Handler()
	admin := identity.Principal{Issuer: "i", ObjectID: "olga", Groups: []string{"operators"}}
	get := func(p identity.Principal, query string) (int, string) {
		r := httptest.NewRequest("GET", "/api/admin/usage"+query, nil)
		r = r.WithContext(identity.NewContext(r.Context(), p))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}

	code, body := get(admin, "")
	var u status.Usage
	if code != http.StatusOK || json.Unmarshal([]byte(body), &u) != nil {
		t.Fatalf("GET /api/admin/usage = %d %s", code, body)
	}
	want := status.Usage{Since: "2026-11-08", Until: "2026-12-07", Rows: []status.UsageRow{
		{Principal: "i|t|bob", Model: "m", Purpose: "compaction", Requests: 1, InputTokens: 2000, OutputTokens: 200},
		{Principal: "i|t|alice", Model: "m", Purpose: "turn", Requests: 4, InputTokens: 400, OutputTokens: 40},
	}}
	if !reflect.DeepEqual(u, want) {
		t.Errorf("the default report = %+v\nwant the 30 days ending today: %+v", u, want)
	}

	code, body = get(admin, "?since=2026-11-01&until=2026-12-07&limit=1")
	u = status.Usage{}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &u) != nil || len(u.Rows) != 1 || !u.More || u.Rows[0].Requests != 54 {
		t.Errorf("GET with a range and limit 1 = %d %s; want alice's 54 requests and more", code, body)
	}

	for _, q := range []string{"?since=yesterday", "?until=2026-13-01", "?since=2026-12-02&until=2026-12-01", "?since=2025-01-01",
		"?limit=0", "?limit=1001", "?limit=x", "?x=1", "?since=2026-12-01&since=2026-12-02", "?since=2026-12-08"} {
		if code, body := get(admin, q); code != http.StatusBadRequest || !strings.Contains(body, `"code":"invalid_usage_query"`) {
			t.Errorf("GET /api/admin/usage%s = %d %s, want 400 invalid_usage_query", q, code, body)
		}
	}
	if code, body := get(identity.Principal{Issuer: "i", ObjectID: "alice", Groups: []string{"staff"}}, ""); code != http.StatusForbidden || !strings.Contains(body, "admin_required") {
		t.Errorf("a person not an admin: %d %s, want 403 admin_required", code, body)
	}
}
