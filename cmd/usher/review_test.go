package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/usherhq/usher/assistant"
)

// reviewRoutes are the reviewers' routes, each with a query it takes.
var reviewRoutes = []string{"/api/audit", "/api/audit/1", "/api/audit/export", "/api/audit/verify",
	"/api/policy", "/api/policy/explain?user=alice&tool=notes_list", "/api/tools"}

// A reviewer (USHER_REVIEW_GROUPS=security, rita signed in with the group
// security) reads alice's calls through `usher serve`, each record as
// `usher audit export` writes it; alice, her broker token and anyone
// without the group are refused, and nothing but GET is answered.
func TestReviewerReadsAliceCalls(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_REVIEW_GROUPS": "security"})
	alice, err := s.cli(t, "token", "user", "--sub", "alice")
	if err != nil {
		t.Fatal(err)
	}
	rita, err := s.cli(t, "token", "user", "--sub", "rita", "--group", "security")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.cli(t, "token", "user", "--sub", "oscar", "--group", "operators")
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, s.url+"/api/me", alice)
	var who assistant.Me
	if err := json.Unmarshal(body, &who); err != nil {
		t.Fatal(err)
	}
	mcpTok, err := s.cli(t, "token", "mcp", "--sub", who.ID, "--group", "security")
	if err != nil {
		t.Fatal(err)
	}
	mcpCall(t, s.url, mcpTok, "tools/call", map[string]any{"name": "notes_list", "arguments": map[string]any{}})
	mcpCall(t, s.url, mcpTok, "tools/call", map[string]any{"name": "notes_delete", "arguments": map[string]any{"name": "x"}})
	mcpCall(t, s.url, mcpTok, "tools/call", map[string]any{"name": "notes_write", "arguments": map[string]any{"name": "x", "body": "y"}})

	// Every line `usher audit export` writes of alice's records.
	out, err := s.cli(t, "audit", "export")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for line := range strings.Lines(out) {
		var r struct{ Principal string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		if r.Principal == who.ID {
			want = append(want, strings.TrimSuffix(line, "\n"))
		}
	}
	if len(want) < 2 {
		t.Fatalf("the export holds %d records of alice, want her calls:\n%s", len(want), out)
	}

	code, body := get(t, s.url+"/api/audit?limit=1000&principal="+url.QueryEscape(who.ID), rita)
	if code != 200 {
		t.Fatalf("rita's GET /api/audit = %d %s", code, body)
	}
	var page struct {
		Records []json.RawMessage `json:"records"`
		Next    string            `json:"next"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != len(want) || page.Next != "" {
		t.Fatalf("rita got %d records (next %q), want %d:\n%s", len(page.Records), page.Next, len(want), body)
	}
	for i, r := range page.Records {
		if string(r) != want[i] {
			t.Errorf("record %d:\n got %s\nwant %s", i, r, want[i])
		}
	}
	if !bytes.Contains(body, []byte(`"tool":"notes_delete"`)) {
		t.Errorf("alice's denied call is not among her records: %s", body)
	}

	for name, c := range map[string]struct {
		token string
		code  int
		err   string
	}{
		"alice":          {alice, 403, "reviewer_required"},
		"oscar":          {other, 403, "reviewer_required"},
		"a broker token": {mcpTok, 403, "broker_token_refused"},
		"no token":       {"", 401, "unauthenticated"},
	} {
		for _, path := range reviewRoutes {
			code, body := get(t, s.url+path, c.token)
			if code != c.code || !strings.Contains(string(body), `"code":"`+c.err+`"`) {
				t.Errorf("%s: GET %s = %d %s, want %d %s", name, path, code, body, c.code, c.err)
			}
		}
	}
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		for _, path := range reviewRoutes {
			req, _ := http.NewRequest(method, s.url+path, strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer "+rita)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 405 {
				t.Errorf("rita: %s %s = %d, want 405", method, path, resp.StatusCode)
			}
		}
	}
	after, err := s.cli(t, "audit", "export")
	if err != nil || after != out {
		t.Errorf("the refused requests changed the log: %v", err)
	}
	code, body = get(t, s.url+"/api/audit/verify", rita)
	if code != 200 || !bytes.Contains(body, []byte(`"intact":true`)) {
		t.Errorf("verify = %d %s", code, body)
	}

	// The policy served is the one `usher policy check` checks, and an
	// explanation is the one `usher policy explain --json` prints for the
	// same inputs.
	check, _ := s.cli(t, "policy", "check")
	code, body = get(t, s.url+"/api/policy", rita)
	var pol struct {
		Hash       string
		Statements []struct{ ID string }
	}
	if err := json.Unmarshal(body, &pol); code != 200 || err != nil || len(pol.Statements) == 0 || !strings.Contains(check, "hash "+pol.Hash) {
		t.Errorf("GET /api/policy = %d %s, policy check says %q", code, body, check)
	}
	for decision, q := range map[string]url.Values{
		"deny":     {"user": {who.ID}, "tool": {"notes_delete"}, "args": {`{"name":"todo"}`}},
		"approve":  {"user": {who.ID}, "tool": {"notes_write"}, "groups": {"security,staff"}},
		"allow":    {"user": {"bob"}, "tool": {"sessions_list"}, "server": {"builtin"}},
		"approve ": {"user": {"bob"}, "tool": {"anything"}, "definition-hash": {"sha256:1"}},
	} {
		args := []string{"policy", "explain", "--json"}
		for k, v := range q {
			args = append(args, "--"+k, v[0])
		}
		cli, err := s.cli(t, args...)
		code, body := get(t, s.url+"/api/policy/explain?"+q.Encode(), rita)
		if err != nil || code != 200 || strings.TrimSpace(string(body)) != strings.TrimSpace(cli) ||
			!strings.HasPrefix(string(body), `{"decision":"`+strings.TrimSpace(decision)+`"`) {
			t.Errorf("explain %v:\nAPI %d %s\nCLI %v %s", q, code, body, err, cli)
		}
	}

	// Every approval of the tenant: alice's, to rita; not to alice.
	code, body = get(t, s.url+"/api/approvals?scope=all&tool=notes_write", rita)
	if code != 200 || !strings.Contains(string(body), `"requested_by":"`+who.ID+`"`) {
		t.Errorf("rita's GET /api/approvals?scope=all = %d %s, want alice's approval", code, body)
	}
	if code, body := get(t, s.url+"/api/approvals?scope=all", alice); code != 403 || !strings.Contains(string(body), `"code":"reviewer_required"`) {
		t.Errorf("alice's GET /api/approvals?scope=all = %d %s, want 403 reviewer_required", code, body)
	}
}
