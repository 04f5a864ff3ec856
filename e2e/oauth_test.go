package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/testenv"
)

// The OAuth tests drive Usher's authorization server with clients from
// outside the project: the official MCP TypeScript SDK's client, whose own
// authorization flow testdata/oauth-client.mjs runs (the browser's part,
// the development provider's sign-in and the consent page, done over HTTP
// with a cookie jar), the MCP Inspector CLI with a token so obtained, and
// the conformance suite's authorization-server scenarios.

// sdkVersion is the MCP TypeScript SDK that package.json pins.
const sdkVersion = "1.32.2"

// oauthScript is the Node.js script of the OAuth client.
var oauthScript = filepath.Join("testdata", "oauth-client.mjs")

// conformanceNext is the entry point of the conformance suite's
// pre-release, installed under an alias beside the released suite: only it
// has the authorization command. Its program has the released one's name,
// so it is not in node_modules/.bin.
var conformanceNext = filepath.Join("node_modules", "conformance-next", "dist", "index.js")

// requireOAuthTools is requireTools, and the packages only these tests use.
func requireOAuthTools(t *testing.T) nodeTools {
	t.Helper()
	nt := requireTools(t)
	missing := func(msg string) {
		testenv.Missing(t, "Node.js tools: "+msg+"; install them with `make e2e-deps`")
	}
	b, err := os.ReadFile(filepath.Join("node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	var pkg struct{ Version string }
	if err != nil || json.Unmarshal(b, &pkg) != nil {
		missing(fmt.Sprintf("the MCP TypeScript SDK is not installed: %v", err))
	}
	if pkg.Version != sdkVersion {
		missing(fmt.Sprintf("node_modules holds the MCP TypeScript SDK %s; package.json pins %s", pkg.Version, sdkVersion))
	}
	if _, err := os.Stat(conformanceNext); err != nil {
		missing(fmt.Sprintf("the conformance suite's pre-release is not installed: %v", err))
	}
	return nt
}

// script runs a Node.js script (a path from this directory) with the
// pinned Node.js, as command runs a package program.
func (nt nodeTools) script(ctx context.Context, home, path string, args ...string) (stdout, stderr string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", "", err
	}
	rel, err := filepath.Rel(nt.dir, abs)
	if err != nil {
		return "", "", err
	}
	return nt.run(ctx, home, rel, args...)
}

// runOAuthClient runs testdata/oauth-client.mjs and decodes its JSON
// output into out.
func runOAuthClient(t *testing.T, nt nodeTools, out any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	stdout, stderr, err := nt.script(ctx, t.TempDir(), oauthScript, args...)
	t.Logf("oauth-client.mjs %s ran for %s", args[0], time.Since(start).Round(time.Millisecond))
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := []byte(lines[len(lines)-1])
	var failure struct{ Error string }
	if json.Unmarshal(last, &failure) == nil && failure.Error != "" {
		t.Fatalf("oauth-client.mjs %s failed: %s\nstderr:\n%s", args[0], failure.Error, stderr)
	}
	if err != nil {
		t.Fatalf("oauth-client.mjs %s: %v\nstdout:\n%s\nstderr:\n%s", args[0], err, stdout, stderr)
	}
	if err := json.Unmarshal(last, out); err != nil {
		t.Fatalf("oauth-client.mjs %s: its output is not JSON: %v\nstdout:\n%s\nstderr:\n%s", args[0], err, stdout, stderr)
	}
}

// The output of `oauth-client.mjs flow`, per registration.
type (
	sdkRequest struct {
		Method, Path, RPC string
		Status            int
		GrantType         string `json:"grant_type"`
		WWWAuthenticate   string `json:"www_authenticate"`
	}
	browserHop struct {
		Method, Path, Page string
		Status             int
		Fields             []string
	}
	toolResult struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Meta              struct {
			Approval struct{ ID, Status, URL string } `json:"usher/approval"`
		} `json:"_meta"`
	}
	flowRun struct {
		Kind     string
		ClientID string `json:"client_id"`
		Requests []sdkRequest
		Auth     struct {
			AuthorizationRequest  map[string]string `json:"authorizationRequest"`
			Hops                  []browserHop
			AuthorizationResponse struct {
				StateMatches bool `json:"state_matches"`
				Iss, Code    string
			} `json:"authorizationResponse"`
		}
		Authorized    bool
		DocumentFetch int `json:"document_fetches"`
		Token         struct {
			Scope      string
			ExpiresIn  int  `json:"expires_in"`
			HasRefresh bool `json:"has_refresh"`
			Claims     tokenClaims
		}
		Tools     []string
		NotesList toolResult `json:"notes_list"`
		Pending   toolResult
		Decision  struct {
			Status int
			Body   string
		}
		Approved     toolResult
		AfterRefresh struct {
			Tools    int
			Requests []sdkRequest
			JTI      string
			ClientID string `json:"client_id"`
			Sub      string
		} `json:"after_refresh"`
		Reauthorize *struct {
			Requests []sdkRequest
			Auth     struct {
				Hops                  []browserHop
				AuthorizationResponse struct {
					StateMatches bool `json:"state_matches"`
					Iss, Code    string
				} `json:"authorizationResponse"`
			}
			Authorized bool
			JTI        string
			Tools      int
		}
	}
)

// tokenClaims are the claims of an access token, as the script decodes them.
type tokenClaims struct {
	Aud, Scope, JTI, Sub string
	ClientID             string `json:"client_id"`
}

// TestOAuthSDKClient runs the official MCP TypeScript SDK's client against
// the embedded default with nothing but the MCP URL: it discovers the
// authorization server from the 401, registers (once by DCR, once by a
// Client ID Metadata Document on loopback), sends the browser through the
// sign-in as alice and the consent page, redeems the code, lists and calls
// tools, retries a call after alice approves it, and refreshes its token
// when Usher refuses the access token. The audit log records each token
// issued, and stays intact.
func TestOAuthSDKClient(t *testing.T) {
	nt := requireOAuthTools(t)
	t.Parallel()
	u := startUsher(t, "", "")
	userToken := u.run(t, "token", "user", "--sub", "alice")
	var out struct{ DCR, CIMD flowRun }
	runOAuthClient(t, nt, &out, "flow", u.url+"/mcp", userToken)

	issued := auditedTokens(t, u)
	var subject string
	for _, run := range []flowRun{out.DCR, out.CIMD} {
		t.Run(run.Kind, func(t *testing.T) {
			checkFlow(t, u, run, issued)
			if subject == "" {
				subject = run.Token.Claims.Sub
			} else if run.Token.Claims.Sub != subject {
				t.Errorf("the two clients' tokens name %q and %q: alice signed in both times", subject, run.Token.Claims.Sub)
			}
		})
	}
	if t.Failed() {
		b, _ := json.MarshalIndent(out, "", "  ")
		t.Logf("oauth-client.mjs flow:\n%s", b)
	}
	t.Log(u.run(t, "audit", "verify"))
}

// checkFlow checks one registration's run of the flow, step by step.
func checkFlow(t *testing.T, u *usher, run flowRun, issued map[string]auditRecord) {
	resource := u.url + "/mcp"

	// Discovery: the 401 names the protected resource's metadata, which
	// names Usher as the authorization server.
	wantStart := []string{"POST /mcp 401", "GET /.well-known/oauth-protected-resource/mcp 200", "GET /.well-known/oauth-authorization-server 200"}
	if run.Kind == "dcr" {
		wantStart = append(wantStart, "POST /oauth/register 201")
	}
	var got []string
	for _, r := range run.Requests {
		got = append(got, fmt.Sprintf("%s %s %d", r.Method, r.Path, r.Status))
	}
	if len(got) < len(wantStart) || !slices.Equal(got[:len(wantStart)], wantStart) {
		t.Errorf("the SDK's first requests = %q, want %q first", got, wantStart)
	} else if want := `resource_metadata="` + u.url + `/.well-known/oauth-protected-resource/mcp"`; !strings.Contains(run.Requests[0].WWWAuthenticate, want) {
		t.Errorf("the 401's WWW-Authenticate = %q, want %s", run.Requests[0].WWWAuthenticate, want)
	}
	if n := countRequests(run.Requests, "POST", "/oauth/register"); run.Kind == "cimd" && n != 0 {
		t.Errorf("the metadata document's client registered %d times", n)
	}
	if run.Kind == "cimd" && run.DocumentFetch < 1 {
		t.Errorf("Usher fetched the client's metadata document %d times", run.DocumentFetch)
	}
	if !strings.HasPrefix(run.ClientID, map[string]string{"dcr": "usher-dcr-", "cimd": "http://127.0.0.1:"}[run.Kind]) {
		t.Errorf("client_id = %q", run.ClientID)
	}

	// The authorization request, and the browser's way through the
	// sign-in and the consent page back to the client.
	ar := run.Auth.AuthorizationRequest
	if ar["resource"] != resource || ar["code_challenge_method"] != "S256" || ar["code_challenge"] != "present" || ar["client_id"] != run.ClientID || ar["response_type"] != "code" {
		t.Errorf("authorization request = %v", ar)
	}
	var hops []string
	for _, h := range run.Auth.Hops {
		hop := fmt.Sprintf("%s %s %d", h.Method, h.Path, h.Status)
		if h.Page != "" {
			hop += " " + h.Page
		}
		hops = append(hops, hop)
	}
	wantHops := []string{
		"GET /oauth/authorize 302",
		"GET /auth/login 303",
		"GET /dev/oidc/authorize 200 sign-in",
		"POST /dev/oidc/authorize 303",
		"GET /auth/callback 303",
		"GET /oauth/authorize/continue 200 consent",
		"POST /oauth/authorize 303",
	}
	if !slices.Equal(hops, wantHops) {
		t.Errorf("the browser's hops = %q, want %q", hops, wantHops)
	}
	if i := slices.IndexFunc(run.Auth.Hops, func(h browserHop) bool { return h.Page == "consent" }); i >= 0 {
		if f := run.Auth.Hops[i].Fields; !slices.Equal(f, []string{"csrf_token", "decision", "request"}) {
			t.Errorf("the consent form's fields = %q", f)
		}
	}
	resp := run.Auth.AuthorizationResponse
	if !resp.StateMatches || resp.Iss != u.url || resp.Code != "present" {
		t.Errorf("authorization response: state matches %v, iss %q, code %s; want the state, iss %s and a code", resp.StateMatches, resp.Iss, resp.Code, u.url)
	}

	// The tokens.
	if !run.Authorized || countRequests(run.Requests, "POST", "/oauth/token") < 1 {
		t.Fatalf("the SDK did not complete the authorization")
	}
	c := run.Token.Claims
	if run.Token.Scope != "mcp:invoke" || !run.Token.HasRefresh || run.Token.ExpiresIn <= 0 || c.Aud != resource || c.ClientID != run.ClientID || c.Scope != "mcp:invoke" || c.JTI == "" || c.Sub == "" {
		t.Errorf("token = %+v", run.Token)
	}
	if rec, ok := issued[c.JTI]; !ok || rec.Details.Grant != "authorization_code" || rec.ClientID != run.ClientID || rec.Principal != c.Sub {
		t.Errorf("the audit log's record of the access token %s = %+v (found %v), want an authorization_code grant to %s for %s", c.JTI, rec, ok, run.ClientID, c.Sub)
	}

	// The tools, under the default policy.
	want := []string{"approvals_list", "notes_list", "notes_read", "notes_write", "session_read", "sessions_list"}
	if !slices.Equal(run.Tools, want) {
		t.Errorf("tools = %q, want %q", run.Tools, want)
	}
	var notes struct{ Notes *[]json.RawMessage }
	if run.NotesList.IsError || json.Unmarshal(run.NotesList.StructuredContent, &notes) != nil || notes.Notes == nil {
		t.Errorf("notes_list = %+v, want the notes", run.NotesList)
	}

	// A call that needs approval, approved by alice in Usher's API, then
	// retried once.
	a := run.Pending.Meta.Approval
	if !run.Pending.IsError || a.ID == "" || a.Status != "pending" || a.URL != u.url+"/approvals/"+a.ID {
		t.Fatalf("notes_write = %+v, want a pending approval", run.Pending)
	}
	if run.Decision.Status != http.StatusOK || !strings.Contains(run.Decision.Body, `"status":"approved"`) || !strings.Contains(run.Decision.Body, `"client_id":"`+run.ClientID+`"`) {
		t.Errorf("the decision = %d %s", run.Decision.Status, run.Decision.Body)
	}
	var written struct{ Name string }
	if run.Approved.IsError || json.Unmarshal(run.Approved.StructuredContent, &written) != nil || written.Name != "oauth-"+run.Kind {
		t.Errorf("the approved retry of notes_write = %+v", run.Approved)
	}

	// The refresh: Usher refuses the spoilt access token, the SDK redeems
	// its refresh token and retries.
	ar2 := run.AfterRefresh
	var after []string
	for _, r := range ar2.Requests {
		s := fmt.Sprintf("%s %s %d", r.Method, r.Path, r.Status)
		if r.GrantType != "" {
			s += " " + r.GrantType
		}
		after = append(after, s)
	}
	if len(after) < 3 || after[0] != "POST /mcp 401" || !slices.Contains(after, "POST /oauth/token 200 refresh_token") || after[len(after)-1] != "POST /mcp 200" {
		t.Errorf("the requests of the refresh = %q, want a 401, a refresh_token grant and the retried request", after)
	}
	if len(ar2.Requests) > 0 && !strings.Contains(ar2.Requests[0].WWWAuthenticate, `error="invalid_token"`) {
		t.Errorf("the 401 of the spoilt token: WWW-Authenticate %q, want error=\"invalid_token\"", ar2.Requests[0].WWWAuthenticate)
	}
	if ar2.Tools != len(want) || ar2.JTI == "" || ar2.JTI == c.JTI || ar2.ClientID != run.ClientID || ar2.Sub != c.Sub {
		t.Errorf("after the refresh: %+v, want %d tools and a new token (not jti %s) for the same client and person", ar2, len(want), c.JTI)
	}
	if rec, ok := issued[ar2.JTI]; !ok || rec.Details.Grant != "refresh_token" || rec.ClientID != run.ClientID || rec.Principal != c.Sub || rec.Details.Family != issued[c.JTI].Details.Family {
		t.Errorf("the audit log's record of the refreshed token %s = %+v (found %v), want a refresh_token grant in the family of %s", ar2.JTI, rec, ok, c.JTI)
	}

	// The DCR client authorizes again with the same browser: alice is
	// signed in and consented to it before, so the code comes at once,
	// with neither the sign-in nor the consent page.
	if run.Kind != "dcr" {
		return
	}
	re := run.Reauthorize
	if re == nil {
		t.Fatal("the script did not authorize the client again")
	}
	var reHops []string
	for _, h := range re.Auth.Hops {
		reHops = append(reHops, fmt.Sprintf("%s %s %d", h.Method, h.Path, h.Status))
	}
	// A GET is answered 302 (the consent form's POST, 303).
	if want := []string{"GET /oauth/authorize 302"}; !slices.Equal(reHops, want) {
		t.Errorf("the second authorization's hops = %q, want %q: the consent is remembered", reHops, want)
	}
	if n := countRequests(re.Requests, "POST", "/oauth/register"); n != 0 {
		t.Errorf("the client registered again (%d times)", n)
	}
	resp2 := re.Auth.AuthorizationResponse
	if !re.Authorized || !resp2.StateMatches || resp2.Iss != u.url || resp2.Code != "present" || re.Tools != len(want) {
		t.Errorf("the second authorization = %+v", re)
	}
	if rec, ok := issued[re.JTI]; !ok || rec.Details.Grant != "authorization_code" || rec.Details.Family == issued[c.JTI].Details.Family {
		t.Errorf("the audit log's record of the second authorization's token %s = %+v (found %v), want an authorization_code grant in a new family", re.JTI, rec, ok)
	}
}

// countRequests counts the requests to method and path.
func countRequests(rs []sdkRequest, method, path string) int {
	n := 0
	for _, r := range rs {
		if r.Method == method && r.Path == path {
			n++
		}
	}
	return n
}

// auditRecord is an oauth_token_issued record of `usher audit export`.
type auditRecord struct {
	Kind      string
	ClientID  string `json:"client_id"`
	Principal string
	TokenJTI  string `json:"token_jti"`
	Details   struct{ Grant, Family, Resource string }
}

// auditedTokens returns the oauth_token_issued records of the audit log, by
// the jti of the token issued.
func auditedTokens(t *testing.T, u *usher) map[string]auditRecord {
	t.Helper()
	out := map[string]auditRecord{}
	sc := bufio.NewScanner(strings.NewReader(u.run(t, "audit", "export")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r auditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("usher audit export: %v: %s", err, sc.Text())
		}
		if r.Kind == "oauth_token_issued" {
			out[r.TokenJTI] = r
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOAuthInspectorCLI reaches /mcp with the MCP Inspector CLI and an
// access token from the authorization server: the SDK's flow gets it, the
// Inspector sends it as the Authorization header.
func TestOAuthInspectorCLI(t *testing.T) {
	nt := requireOAuthTools(t)
	t.Parallel()
	u := startUsher(t, "", "")
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	runOAuthClient(t, nt, &tok, "token", u.url+"/mcp")
	if tok.AccessToken == "" {
		t.Fatal("oauth-client.mjs token printed no access token")
	}

	inspect := func(t *testing.T, request ...string) json.RawMessage {
		t.Helper()
		args := append([]string{"--cli", u.url + "/mcp", "--transport", "http", "--format", "json",
			"--header", "Authorization: Bearer " + tok.AccessToken}, request...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		stdout, stderr, err := nt.run(ctx, t.TempDir(), "mcp-inspector", args...)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		var out struct {
			Result json.RawMessage `json:"result"`
		}
		if err != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &out) != nil || out.Result == nil {
			t.Fatalf("inspector %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(request, " "), err, stdout, stderr)
		}
		return out.Result
	}

	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if err := json.Unmarshal(inspect(t, "--method", "tools/list"), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	if want := []string{"approvals_list", "notes_list", "notes_read", "notes_write", "session_read", "sessions_list"}; !slices.Equal(names, want) {
		t.Errorf("tools = %q, want %q", names, want)
	}
	var res struct {
		IsError           bool `json:"isError"`
		StructuredContent struct {
			Notes *[]json.RawMessage `json:"notes"`
		} `json:"structuredContent"`
	}
	out := inspect(t, "--method", "tools/call", "--tool-name", "notes_list")
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if res.IsError || res.StructuredContent.Notes == nil {
		t.Errorf("notes_list = %s, want the notes and no error", out)
	}
}

// oauthExpected are the authorization-server scenarios of the conformance
// suite's pre-release that Usher is expected to fail, each with the reason;
// a listed scenario that passes fails the test, as in TestConformance.
// None: both scenarios pass.
var oauthExpected = map[string]string{}

// authorizeURL is the line of the suite's output that names the URL to
// open in the browser.
var authorizeURL = regexp.MustCompile(`(?m)^(http://127\.0\.0\.1:\d+/oauth/authorize\?\S+)$`)

// TestOAuthConformance runs the authorization-server scenarios of the
// conformance suite's pre-release (0.2.0-alpha; the released suite has no
// authorization command) against the embedded default: the metadata
// endpoint, and the authorization code grant with a public client
// registered by DCR, whose browser part — the suite prints the
// authorization URL and waits for its callback — testdata/oauth-client.mjs
// does, signing in as alice and approving.
func TestOAuthConformance(t *testing.T) {
	nt := requireOAuthTools(t)
	t.Parallel()
	u := startUsher(t, "", "")
	scenarios := listAuthorizationScenarios(t, nt)
	for name := range oauthExpected {
		if !slices.Contains(scenarios, name) {
			t.Errorf("oauthExpected lists %q, which is not an authorization scenario of the suite", name)
		}
	}
	for _, want := range []string{"authorization-server-metadata-endpoint", "authorization-code-grant"} {
		if !slices.Contains(scenarios, want) {
			t.Errorf("the suite has no scenario %s: its scenarios are %q", want, scenarios)
		}
	}

	port := freePort(t)
	callback := fmt.Sprintf("http://127.0.0.1:%d/callback", port)
	clientID := registerClient(t, u, callback)

	out := filepath.Join(t.TempDir(), "results")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, err := nt.command(ctx, t.TempDir(), mustRel(t, nt, conformanceNext), "authorization",
		"--url", u.url, "--client-id", clientID, "--resource", u.url+"/mcp",
		"--port", fmt.Sprint(port), "--output-dir", out)
	if err != nil {
		t.Fatal(err)
	}
	stdout := &testenv.Output{}
	var stderr bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = io.MultiWriter(stdout, pw), &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The suite prints the authorization URL, then waits for the
	// browser: the script is the browser.
	found := make(chan string, 1)
	go func() {
		defer close(found)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := authorizeURL.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	var browsed struct {
		Redirect string
		Hops     []browserHop
	}
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close() // the scanner ends, and found is closed
		waited <- err
	}()
	if link, ok := <-found; ok {
		runOAuthClient(t, nt, &browsed, "authorize", link)
	}
	err = <-waited
	t.Logf("the suite's authorization scenarios ran for %s (exit: %v)", time.Since(start).Round(time.Millisecond), err)
	if browsed.Redirect == "" {
		t.Errorf("the suite printed no authorization URL\nstdout:\n%s\nstderr:\n%s", stdout, &stderr)
	} else if !strings.HasPrefix(browsed.Redirect, callback+"?") {
		t.Errorf("the browser was sent to %s, want %s", browsed.Redirect, callback)
	}

	results := readResults(t, out, "authorization-server-")
	for _, name := range scenarios {
		checks, ran := results[name]
		reason, listed := oauthExpected[name]
		failures := failedChecks(checks)
		switch {
		case !ran:
			t.Errorf("scenario %s did not run", name)
		case len(failures) > 0 && !listed:
			t.Errorf("scenario %s failed:\n  %s", name, strings.Join(failures, "\n  "))
		case len(failures) == 0 && listed:
			t.Errorf("scenario %s passes, but oauthExpected expects it to fail (%s): remove its entry", name, reason)
		case listed:
			t.Logf("scenario %s fails, as expected: %s\n  %s", name, reason, strings.Join(failures, "\n  "))
		default:
			var ids []string
			for _, c := range checks {
				ids = append(ids, c.ID+" "+c.Status)
			}
			t.Logf("scenario %s passed: %s", name, strings.Join(ids, ", "))
		}
		if ran && len(checks) == 0 {
			t.Errorf("scenario %s made no check", name)
		}
	}
	if t.Failed() {
		t.Logf("the suite's output:\n%s\n%s", stdout, &stderr)
	}
}

// listAuthorizationScenarios returns the names of the pre-release's
// authorization-server scenarios.
func listAuthorizationScenarios(t *testing.T, nt nodeTools) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, stderr, err := nt.script(ctx, t.TempDir(), conformanceNext, "list", "--authorization")
	if err != nil {
		t.Fatalf("conformance list --authorization: %v\n%s%s", err, stdout, stderr)
	}
	var names []string
	for line := range strings.Lines(stdout) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "- "); ok {
			name, _, _ = strings.Cut(name, " ")
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		t.Fatalf("conformance list --authorization named no scenario:\n%s", stdout)
	}
	return names
}

// mustRel is path relative to the tools' directory, as command takes it.
func mustRel(t *testing.T, nt nodeTools, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(nt.dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// registerClient registers a public client with redirectURI by DCR, as
// the suite's operator would before running it, and returns its client_id.
func registerClient(t *testing.T, u *usher, redirectURI string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"client_name":                "MCP conformance suite",
		"redirect_uris":              []string{redirectURI},
		"grant_types":                []string{"authorization_code"},
		"token_endpoint_auth_method": "none",
	})
	resp, err := http.Post(u.url+"/oauth/register", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reg struct {
		ClientID string `json:"client_id"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &reg) != nil || reg.ClientID == "" {
		t.Fatalf("POST /oauth/register: %d %s", resp.StatusCode, b)
	}
	return reg.ClientID
}

// freePort returns a loopback port free a moment ago, for the suite's
// callback server, which takes a port number and cannot pick its own.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// readResults reads each scenario's checks from the suite's output
// directory, whose entries are <prefix><scenario>-<time>.
func readResults(t *testing.T, dir, prefix string) map[string][]check {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("the suite wrote no results: %v", err)
	}
	stamp := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$`)
	results := map[string][]check{}
	for _, e := range entries {
		m := stamp.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "checks.json"))
		if err != nil {
			t.Fatal(err)
		}
		var checks []check
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatalf("%s/checks.json: %v", e.Name(), err)
		}
		results[m[1]] = checks
	}
	return results
}
