package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/status"
)

// TestModelUsage runs two turns of alice's and one of bob's with the demo
// model through usher serve, then reads what they used: GET
// /api/admin/usage as an admin (olga, of admin.groups) and not as alice,
// and `usher usage` as a table and as JSON, the same report.
func TestModelUsage(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_ADMIN_GROUPS": "operators"})
	alice, bob := userToken(t, s, "alice"), userToken(t, s, "bob")
	olga, err := s.cli(t, "token", "user", "--sub", "olga", "--group", "operators")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{alice, alice, bob} {
		if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs?wait=30s", tok, `{"message":"hello there, how are you"}`); code != 201 {
			t.Fatalf("a run with an opening message = %d %v", code, body)
		}
	}
	_, me := apitest.Call(t, "GET", s.url+"/api/me", alice, "")
	aliceID, _ := me["id"].(string)
	var report status.Usage
	awaitTurns := func() bool {
		_, body := get(t, s.url+"/api/admin/usage", olga)
		report = status.Usage{}
		if json.Unmarshal(body, &report) != nil {
			return false
		}
		var n int64
		for _, r := range report.Rows {
			n += r.Requests
		}
		return n >= 3
	}
	testenv.WaitFor(t, 30*time.Second, awaitTurns)
	if len(report.Rows) != 2 || report.Rows[0].Principal != aliceID || report.Rows[0].Requests != 2 ||
		report.Rows[0].Model != "demo" || report.Rows[0].Purpose != "turn" || report.Rows[0].OutputTokens <= 0 || report.Rows[1].Requests != 1 {
		t.Fatalf("GET /api/admin/usage as an admin = %+v; want alice's two turns, then bob's one", report)
	}
	if code, body := apitest.Call(t, "GET", s.url+"/api/admin/usage", alice, ""); code != 403 {
		t.Errorf("GET /api/admin/usage as alice = %d %v, want 403", code, body)
	}

	out, err := s.cli(t, "usage", "-json")
	var fromCLI status.Usage
	if err != nil || json.Unmarshal([]byte(out), &fromCLI) != nil || len(fromCLI.Rows) != 2 || fromCLI.Rows[0] != report.Rows[0] {
		t.Errorf("usher usage -json: %v\n%s\nwant the API's report", err, out)
	}
	out, err = s.cli(t, "usage", "--since", report.Since)
	if err != nil || !strings.Contains(out, "PRINCIPAL") || !strings.Contains(out, report.Rows[0].Principal) || !strings.Contains(out, "3 requests") {
		t.Errorf("usher usage: %v\n%s", err, out)
	}
	if _, err := s.cli(t, "usage", "--since", "2026-12-31", "--until", "2026-12-01"); err == nil {
		t.Error("usher usage with a range backwards: no error")
	}
}
