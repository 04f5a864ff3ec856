package approvals_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// response is a decoded API answer.
type response struct {
	status int
	body   map[string]any
	header http.Header
}

// code returns the error code of an error answer.
func (r response) code() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// serve sends a request to the handler as p (no principal for nil) and
// checks the answer's shape: JSON, and for errors exactly
// {"error": {"code", "message"}}.
func serve(t *testing.T, h http.Handler, p *identity.Principal, method, path, contentType, body string) response {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	if p != nil {
		r = r.WithContext(identity.NewContext(r.Context(), *p))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: body %q is not JSON: %v", method, path, w.Body, err)
	}
	res := response{w.Code, out, w.Header()}
	if w.Code >= 400 {
		e, ok := out["error"].(map[string]any)
		if len(out) != 1 || !ok || len(e) != 2 || res.code() == "" || e["message"] == "" {
			t.Errorf("%s %s: error body %s, want {\"error\":{\"code\",\"message\"}}", method, path, w.Body)
		}
	}
	return res
}

func newHTTPEnv(t *testing.T) (*env, http.Handler) {
	e := newEnv(t, storetest.NewSQLite(t))
	return e, e.svc.Handler(nil)
}

func TestHTTPList(t *testing.T) {
	e, h := newHTTPEnv(t)
	own := e.request(t, binding())
	b := binding()
	b.ArgumentsHash = "args-2"
	e.clock.Advance(time.Second) // listings are oldest first
	reviewed := e.request(t, b, "grp-reviewers")

	res := serve(t, h, &alice, "GET", "/api/approvals", "", "")
	list, _ := res.body["approvals"].([]any)
	if res.status != 200 || len(list) != 2 {
		t.Fatalf("Alice's list = %d %v, want her two requests", res.status, res.body)
	}
	first := list[0].(map[string]any)
	if first["id"] != own.ID || first["status"] != "pending" || first["can_approve"] != true ||
		first["url"] != "https://usher.example.com/approvals/"+own.ID || first["requested_by"] != alice.ID() {
		t.Errorf("Alice's first approval = %v", first)
	}
	if args, _ := first["arguments"].(map[string]any); args["name"] != "todo" {
		t.Errorf("arguments shown = %v, want the call's", first["arguments"])
	}
	second := list[1].(map[string]any)
	if second["id"] != reviewed.ID || second["can_approve"] != false || second["can_deny"] != true {
		t.Errorf("Alice's reviewed request = %v, want can_deny only", second)
	}

	res = serve(t, h, &bob, "GET", "/api/approvals", "", "")
	list, _ = res.body["approvals"].([]any)
	if res.status != 200 || len(list) != 1 || list[0].(map[string]any)["can_approve"] != true {
		t.Errorf("Bob's list = %d %v, want the one he may approve", res.status, res.body)
	}
	res = serve(t, h, &carol, "GET", "/api/approvals", "", "")
	if list, ok := res.body["approvals"].([]any); res.status != 200 || !ok || len(list) != 0 {
		t.Errorf("Carol's list = %d %v, want an empty array", res.status, res.body)
	}
	if res := serve(t, h, nil, "GET", "/api/approvals", "", ""); res.status != 401 || res.code() != "unauthenticated" {
		t.Errorf("list without a principal = %d %s, want 401 unauthenticated", res.status, res.code())
	}
}

func TestHTTPGet(t *testing.T) {
	e, h := newHTTPEnv(t)
	own := e.request(t, binding())
	b := binding()
	b.ArgumentsHash = "args-2"
	reviewed := e.request(t, b, "grp-reviewers")

	missing := serve(t, h, &alice, "GET", "/api/approvals/missing", "", "")
	tests := []struct {
		name   string
		who    *identity.Principal
		path   string
		status int
	}{
		{"the requester", &alice, "/api/approvals/" + own.ID, 200},
		{"a reviewer", &bob, "/api/approvals/" + reviewed.ID, 200},
		{"a reviewer, of a request without reviewers", &bob, "/api/approvals/" + own.ID, 404},
		{"a stranger", &carol, "/api/approvals/" + own.ID, 404},
		{"a member of another group", &mallory, "/api/approvals/" + reviewed.ID, 404},
		{"an overlong id", &alice, "/api/approvals/" + strings.Repeat("a", 200), 404},
		{"a path below", &alice, "/api/approvals/" + own.ID + "/more/below", 404},
		{"no principal", nil, "/api/approvals/" + own.ID, 401},
	}
	for _, tt := range tests {
		res := serve(t, h, tt.who, "GET", tt.path, "", "")
		if res.status != tt.status {
			t.Errorf("GET as %s = %d %v, want %d", tt.name, res.status, res.body, tt.status)
		}
		// Not yours reads exactly as does not exist.
		if tt.status == 404 && res.code() != missing.code() {
			t.Errorf("GET as %s = %v, want the same answer as a missing approval %v", tt.name, res.body, missing.body)
		}
	}
}

func TestHTTPDecision(t *testing.T) {
	e, h := newHTTPEnv(t)
	c := binding()
	c.ArgumentsHash = "args-3"
	late := e.request(t, c)
	e.clock.Advance(approvals.DefaultTTL / 2)
	own := e.request(t, binding())
	b := binding()
	b.ArgumentsHash = "args-2"
	reviewed := e.request(t, b, "grp-reviewers")
	d := binding()
	d.ArgumentsHash = "args-4"
	fresh := e.request(t, d)
	e.clock.Advance(approvals.DefaultTTL / 2) // late has expired, the others have not

	decide := func(who *identity.Principal, id, body string) response {
		return serve(t, h, who, "POST", "/api/approvals/"+id+"/decision", "application/json; charset=utf-8", body)
	}
	tests := []struct {
		name   string
		who    *identity.Principal
		id     string
		body   string
		status int
		code   string
	}{
		{"a stranger approves", &carol, own.ID, `{"decision":"approve"}`, 404, "not_found"},
		{"the requester approves her own", &alice, own.ID, `{"decision":"approve","reason":"mine"}`, 200, ""},
		{"the requester decides again", &alice, own.ID, `{"decision":"deny"}`, 409, "approval_decided"},
		{"the requester approves where reviewers decide", &alice, reviewed.ID, `{"decision":"approve"}`, 403, "approval_forbidden"},
		{"a reviewer approves", &bob, reviewed.ID, `{"decision":"approve","reason":"ok"}`, 200, ""},
		{"anyone decides an expired one", &alice, late.ID, `{"decision":"approve"}`, 410, "approval_expired"},
		{"a reason too long", &alice, fresh.ID, `{"decision":"deny","reason":"` + strings.Repeat("x", approvals.MaxReasonRunes+1) + `"}`, 400, "invalid_request"},
		{"a reason with an escape sequence", &alice, fresh.ID, `{"decision":"deny","reason":"\u001b[2J"}`, 400, "invalid_request"},
		{"a missing approval", &alice, "missing", `{"decision":"approve"}`, 404, "not_found"},
		{"no principal", nil, fresh.ID, `{"decision":"approve"}`, 401, "unauthenticated"},
		{"the requester denies", &alice, fresh.ID, `{"decision":"deny","reason":"not now"}`, 200, ""},
	}
	for _, tt := range tests {
		res := decide(tt.who, tt.id, tt.body)
		if res.status != tt.status || (tt.code != "" && res.code() != tt.code) {
			t.Errorf("%s: %d %v, want %d %s", tt.name, res.status, res.body, tt.status, tt.code)
		}
	}
	for id, want := range map[string]store.ApprovalStatus{
		own.ID: store.ApprovalApproved, reviewed.ID: store.ApprovalApproved,
		late.ID: store.ApprovalPending, fresh.ID: store.ApprovalDenied,
	} {
		if a, _ := e.st.GetApproval(t.Context(), id); a.Status != want {
			t.Errorf("approval %s is %s, want %s", id, a.Status, want)
		}
	}
	res := serve(t, h, &alice, "GET", "/api/approvals/"+own.ID, "", "")
	if res.body["status"] != "approved" || res.body["decided_by"] != alice.ID() || res.body["decision_reason"] != "mine" ||
		res.body["can_approve"] != false {
		t.Errorf("the approved approval reads %v", res.body)
	}
	if res := serve(t, h, &alice, "GET", "/api/approvals/"+late.ID, "", ""); res.body["status"] != "expired" {
		t.Errorf("the expired approval reads as %v, want expired before any sweep", res.body["status"])
	}
}

// Every malformed decision is refused with 400 (413, 415) in the one error
// shape, and decides nothing.
func TestHTTPHostileBodies(t *testing.T) {
	e, h := newHTTPEnv(t)
	a := e.request(t, binding())
	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
	}{
		{"empty body", "application/json", ``, 400},
		{"not JSON", "application/json", `approve`, 400},
		{"an array", "application/json", `["approve"]`, 400},
		{"a string", "application/json", `"approve"`, 400},
		{"no decision", "application/json", `{"reason":"ok"}`, 400},
		{"decision null", "application/json", `{"decision":null}`, 400},
		{"decision a number", "application/json", `{"decision":1}`, 400},
		{"decision a boolean", "application/json", `{"decision":true}`, 400},
		{"decision an object", "application/json", `{"decision":{"value":"approve"}}`, 400},
		{"decision an array", "application/json", `{"decision":["approve"]}`, 400},
		{"decision unknown", "application/json", `{"decision":"yes"}`, 400},
		{"decision in capitals", "application/json", `{"decision":"Approve"}`, 400},
		{"decision padded", "application/json", `{"decision":" approve"}`, 400},
		{"member name in capitals", "application/json", `{"Decision":"approve"}`, 400},
		{"unknown member", "application/json", `{"decision":"approve","approver":"bob"}`, 400},
		{"repeated decision", "application/json", `{"decision":"deny","decision":"approve"}`, 400},
		{"repeated reason", "application/json", `{"decision":"approve","reason":"a","reason":"b"}`, 400},
		{"reason a number", "application/json", `{"decision":"approve","reason":5}`, 400},
		{"reason too long", "application/json", `{"decision":"approve","reason":"` + strings.Repeat("r", 2001) + `"}`, 400},
		{"reason with NUL", "application/json", `{"decision":"approve","reason":"a\u0000b"}`, 400},
		{"trailing object", "application/json", `{"decision":"approve"} {"decision":"deny"}`, 400},
		{"trailing garbage", "application/json", `{"decision":"approve"}x`, 400},
		{"truncated", "application/json", `{"decision":"approve"`, 400},
		{"oversized", "application/json", `{"decision":"approve","reason":"` + strings.Repeat("r", 64<<10) + `"}`, 413},
		{"form encoded", "application/x-www-form-urlencoded", `decision=approve`, 415},
		{"text", "text/plain", `{"decision":"approve"}`, 415},
		{"no content type", "", `{"decision":"approve"}`, 415},
	}
	for _, tt := range tests {
		res := serve(t, h, &alice, "POST", "/api/approvals/"+a.ID+"/decision", tt.contentType, tt.body)
		if res.status != tt.status {
			t.Errorf("%s: %d %v, want %d", tt.name, res.status, res.body, tt.status)
		}
	}
	if got, _ := e.st.GetApproval(t.Context(), a.ID); got.Status != store.ApprovalPending {
		t.Errorf("after hostile bodies the approval is %s, want pending", got.Status)
	}
	if res := serve(t, h, &alice, "POST", "/api/approvals/"+a.ID+"/decision", "application/json",
		" \n{\"reason\":\"fine\",\n \"decision\":\"approve\"}\n"); res.status != 200 {
		t.Errorf("a well-formed body with spaces, reason first: %d %v, want 200", res.status, res.body)
	}
}

func TestHTTPMethods(t *testing.T) {
	e, h := newHTTPEnv(t)
	a := e.request(t, binding())
	for _, tt := range []struct{ method, path, allow string }{
		{"POST", "/api/approvals", "GET, HEAD"},
		{"DELETE", "/api/approvals?scope=all", "GET, HEAD"},
		{"DELETE", "/api/approvals/" + a.ID, "GET, HEAD"},
		{"PUT", "/api/approvals/" + a.ID, "GET, HEAD"},
		{"GET", "/api/approvals/" + a.ID + "/decision", "POST"},
	} {
		if res := serve(t, h, &alice, tt.method, tt.path, "application/json", `{}`); res.status != 405 || res.header.Get("Allow") != tt.allow {
			t.Errorf("%s %s = %d, Allow %q; want 405, Allow %q", tt.method, tt.path, res.status, res.header.Get("Allow"), tt.allow)
		}
	}
}

func TestHandlerReadsBodyOnce(t *testing.T) {
	// The body limit is the handler's own: a client cannot stream more.
	e, h := newHTTPEnv(t)
	a := e.request(t, binding())
	r := httptest.NewRequest("POST", "/api/approvals/"+a.ID+"/decision", io.MultiReader(
		strings.NewReader(`{"decision":"approve","reason":"`), strings.NewReader(strings.Repeat("r", 1<<20)), strings.NewReader(`"}`)))
	r.ContentLength = -1
	r.Header.Set("Content-Type", "application/json")
	r = r.WithContext(identity.NewContext(r.Context(), alice))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a streamed 1 MiB body = %d, want 413", w.Code)
	}
}

// TestHTTPViewNamesTheAction: an approval of a resource read, a prompt get
// or a completion shows its action and what it acts on, apart from the
// name it is bound to; a tool call's is call_tool of the tool.
func TestHTTPViewNamesTheAction(t *testing.T) {
	e, h := newHTTPEnv(t)
	for _, tc := range []struct{ bound, action, name string }{
		{"notes_write", "call_tool", "notes_write"},
		{"read_resource:docs__file:///guide.md", "read_resource", "docs__file:///guide.md"},
		{"get_prompt:docs__summarize", "get_prompt", "docs__summarize"},
		{"complete:docs__file:///{path}", "complete", "docs__file:///{path}"},
	} {
		b := binding()
		b.Tool = tc.bound
		a := e.request(t, b)
		res := serve(t, h, &alice, "GET", "/api/approvals/"+a.ID, "", "")
		if res.status != 200 || res.body["tool"] != tc.bound || res.body["action"] != tc.action || res.body["name"] != tc.name {
			t.Errorf("%s: %d tool %v action %v name %v, want %q %q", tc.bound, res.status, res.body["tool"], res.body["action"], res.body["name"], tc.action, tc.name)
		}
	}
}
