package apitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Call sends one request with a bearer token (none when empty) and a JSON
// body (none when empty), and the header name, value pairs, and returns
// the status and the decoded JSON body (nil when empty).
func Call(t testing.TB, method, url, token, body string, header ...string) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %d, not JSON: %s", method, url, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out
}

// ErrorCode is the code of an API error body ({"error": {"code": …}}).
func ErrorCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// Run reads the run id through the Assistant API of the server at base.
func Run(t testing.TB, base, token, id string) map[string]any {
	t.Helper()
	code, body := Call(t, "GET", base+"/api/assistant/runs/"+id, token, "")
	if code != 200 {
		t.Fatalf("get run = %d %v", code, body)
	}
	return body["run"].(map[string]any)
}

// Events returns the whole event log of the run id, page after page, from
// the Assistant API of the server at base.
func Events(t testing.TB, base, token, id string) []map[string]any {
	t.Helper()
	var all []map[string]any
	after := 0.0
	for {
		code, body := Call(t, "GET", fmt.Sprintf("%s/api/assistant/runs/%s/events?after=%d", base, id, int64(after)), token, "")
		if code != 200 {
			t.Fatalf("events = %d %v", code, body)
		}
		page, _ := body["events"].([]any)
		for _, e := range page {
			all = append(all, e.(map[string]any))
			after = e.(map[string]any)["seq"].(float64)
		}
		if more, _ := body["hasMore"].(bool); !more {
			return all
		}
	}
}
