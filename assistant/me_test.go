package assistant

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/oauth2"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store/storetest"
)

// TestMeHandler answers who the caller is, which roles they hold, and
// 401 to a request without a principal (one that did not pass the
// identity middleware).
func TestMeHandler(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	MeHandler(Roles{}).ServeHTTP(rec, httptest.NewRequest("GET", "/api/me", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("without a principal: %d %s, want 401", rec.Code, rec.Body)
	}
	p := identity.Principal{Issuer: "https://idp.example.com", Tenant: "t1", ObjectID: "o1", Name: "Alice", Scopes: []string{"usher.api"}}
	req := httptest.NewRequest("GET", "/api/me", nil).WithContext(identity.NewContext(t.Context(), p))
	for _, c := range []struct {
		name  string
		roles Roles
		want  [2]bool // reviewer, admin
	}{
		{"no roles", Roles{}, [2]bool{}},
		{"neither", Roles{Reviewer: func(identity.Principal) bool { return false }, Admin: func(identity.Principal) bool { return false }}, [2]bool{}},
		{"a reviewer", Roles{Reviewer: func(q identity.Principal) bool { return q.ID() == p.ID() }}, [2]bool{true, false}},
		{"an admin", Roles{Admin: func(q identity.Principal) bool { return q.ObjectID == "o1" }}, [2]bool{false, true}},
	} {
		rec = httptest.NewRecorder()
		MeHandler(c.roles).ServeHTTP(rec, req)
		var got Me
		if err := json.Unmarshal(rec.Body.Bytes(), &got); rec.Code != http.StatusOK || err != nil ||
			got.ID != p.ID() || got.Tenant != "t1" || got.ObjectID != "o1" || got.Name != "Alice" || !slices.Equal(got.Scopes, p.Scopes) {
			t.Errorf("%s: GET /api/me = %d %s, want %s", c.name, rec.Code, rec.Body, p.ID())
		}
		if [2]bool{got.Reviewer, got.Admin} != c.want {
			t.Errorf("%s: reviewer, admin = %v %v, want %v", c.name, got.Reviewer, got.Admin, c.want)
		}
	}
}

// TestRuntimeMetricsRegistered checks that Options.Registerer receives the
// runtime's metrics, and that a registry that already has them is an
// error of New's.
func TestRuntimeMetricsRegistered(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	provider, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "k", Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts := &Options{Store: storetest.NewSQLite(t), Model: provider, MCPURL: "http://127.0.0.1:1/mcp",
		Tokens: func(ctx context.Context, g Grant) oauth2.TokenSource { return nil }, Registerer: reg}
	if _, err := New(opts); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, want := range []string{"usher_assistant_held_sessions", "usher_assistant_compactions_total", "usher_live_subscribers", "usher_assistant_turns_retried_total",
		"usher_model_requests_total", "usher_model_request_duration_seconds", "usher_model_time_to_first_token_seconds", "usher_model_tokens_total"} {
		if !slices.Contains(names, want) {
			t.Errorf("the registry has %v, not %s", names, want)
		}
	}
	if _, err := New(opts); err == nil {
		t.Error("New registered its metrics twice without an error")
	}
}
