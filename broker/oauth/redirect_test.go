package oauth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/usherhq/usher/broker/oauth"
)

func TestCheckRedirectURI(t *testing.T) {
	t.Parallel()
	accepted := []string{
		"https://client.example/callback",
		"https://client.example:8443/cb?tenant=a",
		"https://vscode.dev/redirect",
		"http://127.0.0.1/callback",
		"http://127.0.0.1:33418",
		"http://127.0.0.2:1234/cb",
		"http://[::1]:8080/cb",
		"http://localhost:6274/oauth/callback",
		"HTTPS://client.example/cb",
		"com.example.app:/oauth2redirect/example-provider",
		"com.example.app://callback",
		// Private-use schemes that are not reversed domain names, as the
		// desktop clients register them.
		"cursor://anysphere.cursor-mcp/oauth/callback",
		"cursor://anysphere.cursor-retrieval/oauth/user-usher/callback",
		"vscode://vscode.github-authentication/did-authenticate",
		"vscode-insiders://callback/oauth",
		"windsurf://codeium.windsurf/oauth/callback",
		"claude://claude.ai/mcp/callback",
		"myapp:/callback",
		"Cursor://anysphere.cursor-mcp/oauth/callback",
		"x-app+v2://callback",
	}
	for _, uri := range accepted {
		if err := oauth.CheckRedirectURI(uri); err != nil {
			t.Errorf("CheckRedirectURI(%q) = %v, want nil", uri, err)
		}
	}
	refused := []struct{ name, uri string }{
		{"empty", ""},
		{"relative", "/callback"},
		{"no scheme", "client.example/callback"},
		{"fragment", "https://client.example/cb#x"},
		{"empty fragment", "https://client.example/cb#"},
		{"javascript", "javascript:alert(1)"},
		{"javascript with slashes", "javascript://%0aalert(1)"},
		{"data", "data:text/html,<script>alert(1)</script>"},
		{"data base64", "data:text/html;base64,PHNjcmlwdD4="},
		{"file", "file:///etc/passwd"},
		{"vbscript", "vbscript:msgbox(1)"},
		{"http to a public host", "http://client.example/callback"},
		{"http to a private address", "http://10.0.0.1/callback"},
		{"http to a look-alike of loopback", "http://127.0.0.1.evil.example/cb"},
		{"http to localhost subdomain", "http://localhost.evil.example/cb"},
		{"https without host", "https:///cb"},
		{"https opaque", "https:client.example"},
		{"user info", "https://user:pass@client.example/cb"},
		{"user info on loopback", "http://evil.example@127.0.0.1/cb"},
		{"javascript in capitals", "JavaScript:alert(1)"},
		{"javascript with a path", "javascript:/alert(1)"},
		{"vbscript with slashes", "vbscript://x/msgbox(1)"},
		{"data with a path", "data:/text/html,x"},
		{"file on a host", "file://server/share/x"},
		{"blob", "blob:https://client.example/uuid"},
		{"filesystem", "filesystem:https://client.example/temporary/x"},
		{"about", "about:/blank"},
		{"view-source", "view-source:/https://client.example/"},
		{"chrome", "chrome://settings/"},
		{"chrome-extension", "chrome-extension://abcdef/cb.html"},
		{"websocket", "ws://127.0.0.1:8080/cb"},
		{"secure websocket", "wss://client.example/cb"},
		{"ftp", "ftp://client.example/cb"},
		{"mailto", "mailto://attacker@evil.example"},
		{"android intent", "intent://callback#Intent;scheme=app;end"},
		{"android intent without fragment", "intent://callback/x"},
		{"windows handler", "ms-msdt:/id PCWDiagnostic"},
		{"windows handler, no space", "ms-msdt:/id"},
		{"windows settings", "ms-settings://privacy"},
		{"windows search", "search-ms://query=x"},
		{"windows drive", "C:/Windows/System32/cmd.exe"},
		{"one-letter scheme", "x://callback"},
		{"private-use scheme without a dot, opaque", "myapp:callback"},
		{"private-use scheme opaque", "com.example.app:callback"},
		{"private-use scheme without path", "com.example.app:"},
		{"space", "https://client.example/call back"},
		{"newline", "https://client.example/cb\n"},
		{"tab in host", "https://client\t.example/cb"},
		{"NUL", "https://client.example/\x00"},
		{"backslash", "https://client.example\\@evil.example/"},
		{"non-ASCII look-alike", "https://clіent.example/cb"},
		{"angle brackets", "https://client.example/<script>"},
		{"too long", "https://client.example/" + strings.Repeat("a", 2000)},
		{"bad port", "http://127.0.0.1:port/cb"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			err := oauth.CheckRedirectURI(tt.uri)
			var e *oauth.Error
			if !errors.As(err, &e) || e.Code != oauth.CodeInvalidRedirectURI || e.Description == "" || e.Redirectable {
				t.Errorf("CheckRedirectURI(%q) = %v, want invalid_redirect_uri", tt.uri, err)
			}
		})
	}
}

func TestMatchRedirect(t *testing.T) {
	t.Parallel()
	web := []string{"https://client.example/cb", "https://client.example/other?a=1"}
	native := []string{"http://127.0.0.1/callback", "http://[::1]:8080/cb", "http://localhost:6274/oauth/callback", "com.example.app:/cb"}
	tests := []struct {
		name       string
		registered []string
		requested  string
		native     bool
		want       bool
	}{
		{"exact", web, "https://client.example/cb", false, true},
		{"exact with query", web, "https://client.example/other?a=1", false, true},
		{"trailing slash", web, "https://client.example/cb/", false, false},
		{"missing trailing part", web, "https://client.example/c", false, false},
		{"case of path", web, "https://client.example/CB", false, false},
		{"case of host", web, "https://CLIENT.example/cb", false, false},
		{"case of scheme", web, "HTTPS://client.example/cb", false, false},
		{"extra query", web, "https://client.example/cb?x=1", false, false},
		{"extra query parameter", web, "https://client.example/other?a=1&b=2", false, false},
		{"query order", []string{"https://client.example/cb?a=1&b=2"}, "https://client.example/cb?b=2&a=1", false, false},
		{"percent-encoding", web, "https://client.example/%63b", false, false},
		{"fragment", web, "https://client.example/cb#x", false, false},
		{"explicit default port", web, "https://client.example:443/cb", false, false},
		{"other port of a web client", web, "https://client.example:8443/cb", true, false},
		{"nothing registered", nil, "https://client.example/cb", false, false},
		{"empty request", web, "", false, false},

		{"loopback exact", native, "http://127.0.0.1/callback", true, true},
		{"loopback any port", native, "http://127.0.0.1:51234/callback", true, true},
		{"loopback any port, not native", native, "http://127.0.0.1:51234/callback", false, false},
		{"IPv6 loopback other port", native, "http://[::1]:9999/cb", true, true},
		{"IPv6 loopback no port", native, "http://[::1]/cb", true, true},
		{"IPv6 loopback is not IPv4 loopback", native, "http://[::1]:51234/callback", true, false},
		{"loopback port with other path", native, "http://127.0.0.1:51234/callback/", true, false},
		{"loopback port with extra query", native, "http://127.0.0.1:51234/callback?x=1", true, false},
		{"loopback port out of range", native, "http://127.0.0.1:65536/callback", true, false},
		{"loopback port zero", native, "http://127.0.0.1:0/callback", true, false},
		{"loopback port too long", native, "http://127.0.0.1:000001/callback", true, false},
		{"loopback port with sign", native, "http://127.0.0.1:+80/callback", true, false},
		{"loopback empty port", native, "http://127.0.0.1:/callback", true, false},
		{"loopback look-alike host", native, "http://127.0.0.1.evil.example:80/callback", true, false},
		{"loopback user info", native, "http://127.0.0.1:80@evil.example/callback", true, false},
		{"loopback fragment", native, "http://127.0.0.1:5000/callback#x", true, false},
		{"other loopback address", native, "http://127.0.0.2:5000/callback", true, false},
		{"https on loopback", native, "https://127.0.0.1:5000/callback", true, false},
		{"localhost exact", native, "http://localhost:6274/oauth/callback", true, true},
		{"localhost other port", native, "http://localhost:6275/oauth/callback", true, false},
		{"localhost for 127.0.0.1", native, "http://localhost/callback", true, false},
		{"private-use exact", native, "com.example.app:/cb", true, true},
		{"private-use other path", native, "com.example.app:/cb2", true, false},
		{"registered with port, any port", []string{"http://127.0.0.1:8080/cb"}, "http://127.0.0.1:9090/cb", true, true},
		{"registered with port, requested none", []string{"http://127.0.0.1:8080/cb"}, "http://127.0.0.1/cb", true, true},
		{"registered root, requested path", []string{"http://127.0.0.1:33418"}, "http://127.0.0.1:40000/", true, false},
		{"registered root, any port", []string{"http://127.0.0.1:33418"}, "http://127.0.0.1:40000", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := oauth.MatchRedirect(tt.registered, tt.requested, tt.native); got != tt.want {
				t.Errorf("MatchRedirect(%q, %q, %v) = %v, want %v", tt.registered, tt.requested, tt.native, got, tt.want)
			}
		})
	}
}

func FuzzMatchRedirect(f *testing.F) {
	f.Add("http://127.0.0.1/callback", "http://127.0.0.1:5000/callback")
	f.Add("http://[::1]:8080/cb", "http://[::1]/cb")
	f.Add("https://client.example/cb", "https://client.example/cb")
	f.Fuzz(func(t *testing.T, registered, requested string) {
		if !oauth.MatchRedirect([]string{registered}, requested, true) || registered == requested {
			return
		}
		// A match that is not exact is a loopback IP redirect on the same
		// scheme and host that passes the registration checks.
		if oauth.CheckRedirectURI(requested) != nil {
			t.Errorf("matched an invalid redirect URI %q", requested)
		}
		if !strings.HasPrefix(requested, "http://127.0.0.1") && !strings.HasPrefix(requested, "http://[::1]") {
			t.Errorf("%q matched %q without being loopback", requested, registered)
		}
		if strings.ContainsAny(requested, "#@") {
			t.Errorf("matched %q", requested)
		}
	})
}

func FuzzCheckRedirectURI(f *testing.F) {
	f.Add("https://client.example/cb")
	f.Add("com.example.app:/cb")
	f.Add("javascript:alert(1)")
	f.Fuzz(func(t *testing.T, uri string) {
		if oauth.CheckRedirectURI(uri) != nil {
			return
		}
		lower := strings.ToLower(uri)
		for _, bad := range []string{"javascript:", "data:", "file:", "vbscript:"} {
			if strings.HasPrefix(lower, bad) {
				t.Errorf("accepted %q", uri)
			}
		}
		if strings.ContainsAny(uri, "# \t\r\n\\\"<>") {
			t.Errorf("accepted %q", uri)
		}
	})
}
