package clientmeta_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/usherhq/usher/broker/clientmeta"
)

// TestRedirectURIProblem checks the one redirect URI rule of every kind of
// client (broker/oauth's CheckRedirectURI, for registered and configured
// clients, is this rule too; its tests hold the long table of refusals).
func TestRedirectURIProblem(t *testing.T) {
	for _, uri := range []string{
		"https://client.example/callback",
		"http://127.0.0.1:33418/callback",
		"http://[::1]:8080/cb",
		"http://localhost:6274/oauth/callback",
		"com.example.app:/oauth2redirect",
		"cursor://anysphere.cursor-mcp/oauth/callback",
		"vscode://vscode.github-authentication/did-authenticate",
		"myapp:/callback",
	} {
		if p := clientmeta.RedirectURIProblem(uri); p != "" {
			t.Errorf("RedirectURIProblem(%q) = %q, want it accepted", uri, p)
		}
	}
	for name, uri := range map[string]string{
		"empty":                   "",
		"relative":                "/cb",
		"fragment":                "https://client.example/cb#x",
		"javascript":              "javascript:alert(1)",
		"data":                    "data:text/html,hi",
		"vbscript with slashes":   "vbscript://x/msgbox(1)",
		"a Windows handler":       "ms-settings://privacy",
		"a Windows drive":         "C:/Windows/System32/cmd.exe",
		"an Android intent":       "intent://callback/x",
		"http to a remote host":   "http://client.example/cb",
		"private-use, opaque":     "myapp:callback",
		"user info":               "https://u@client.example/cb",
		"a non-ASCII look-alike":  "https://clіent.example/cb",
		"longer than the maximum": "https://client.example/" + strings.Repeat("a", clientmeta.MaxRedirectURILen),
	} {
		if p := clientmeta.RedirectURIProblem(uri); p == "" || !strings.HasSuffix(p, ".") {
			t.Errorf("RedirectURIProblem of %s = %q, want a sentence saying why not", name, p)
		}
	}
}

// TestFetchChecksRedirectURIsByTheOneRule checks that a metadata document
// is accepted or refused by its redirect URIs exactly as RedirectURIProblem
// says — the rule registrations are held to —, so that a desktop client's
// private-use scheme without a dot (Cursor's, VS Code's) works by either
// route, and the schemes a browser or an operating system acts on by
// neither. A refusal's Cause, for the logs, says why.
func TestFetchChecksRedirectURIsByTheOneRule(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	for _, uri := range []string{
		"cursor://anysphere.cursor-mcp/oauth/callback",
		"vscode://vscode.github-authentication/did-authenticate",
		"vscode-insiders://callback/oauth",
		"myapp:/callback",
		"com.example.app:/cb",
		"https://app.example.com/cb",
		"javascript:alert(1)",
		"vbscript://x/msgbox(1)",
		"ms-settings://privacy",
		"C:/Windows/System32/cmd.exe",
		"intent://callback/x",
		"myapp:callback",
		"http://app.example.com/cb",
	} {
		t.Run(uri, func(t *testing.T) {
			s.set(serveJSON(document(id, func(d map[string]any) { d["redirect_uris"] = []string{"https://app.example.com/ok", uri} })))
			doc, err := fetcher(t, s, nil).Fetch(t.Context(), id)
			problem := clientmeta.RedirectURIProblem(uri)
			switch {
			case problem == "" && err != nil:
				t.Errorf("a document with the redirect URI was refused: %v", err)
			case problem == "" && !doc.RedirectURIAllowed(uri):
				t.Errorf("the document's redirect_uris %q lack it", doc.RedirectURIs)
			case problem != "":
				var ce *clientmeta.Error
				if !errors.As(err, &ce) || ce.Reason != "the client metadata document has a redirect_uri that is not acceptable" ||
					ce.Cause == nil || ce.Cause.Error() != problem {
					t.Errorf("Fetch = %v, want the refusal of a redirect_uri because %q", err, problem)
				}
			}
		})
	}
}
