package httpx

import (
	"net/http/httptest"
	"testing"
)

func TestOrigin(t *testing.T) {
	for raw, want := range map[string]string{
		"https://Usher.Example.com/path?q=1": "https://usher.example.com",
		"https://usher.example.com:443":      "https://usher.example.com",
		"http://usher.example.com:80/":       "http://usher.example.com",
		"https://usher.example.com:8443":     "https://usher.example.com:8443",
		"http://127.0.0.1:8080":              "http://127.0.0.1:8080",
		"http://[::1]:8080":                  "http://[::1]:8080",
		"null":                               "",
		"ws://usher.example.com":             "",
		"https://user@usher.example.com":     "",
		"/relative":                          "",
	} {
		if got := Origin(raw); got != want {
			t.Errorf("Origin(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	const public = "http://127.0.0.1:8080"
	tests := []struct {
		name    string
		origin  []string
		fetch   string
		allowed bool
	}{
		{name: "same origin", origin: []string{"http://127.0.0.1:8080"}, allowed: true},
		{name: "same origin, browser agrees", origin: []string{"http://127.0.0.1:8080"}, fetch: "same-origin", allowed: true},
		{name: "not a browser", allowed: true},
		{name: "wrong scheme", origin: []string{"https://127.0.0.1:8080"}},
		{name: "wrong port", origin: []string{"http://127.0.0.1:8081"}},
		{name: "default port", origin: []string{"http://127.0.0.1"}},
		{name: "wrong host", origin: []string{"http://localhost:8080"}},
		{name: "opaque origin", origin: []string{"null"}},
		{name: "two origins", origin: []string{"http://127.0.0.1:8080", "http://127.0.0.1:8080"}},
		{name: "browser says cross-site", origin: []string{"http://127.0.0.1:8080"}, fetch: "cross-site"},
		{name: "browser says same-site", origin: []string{"http://127.0.0.1:8080"}, fetch: "same-site"},
		{name: "cross-site without an Origin", fetch: "cross-site"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", public+"/ws", nil)
			for _, o := range tt.origin {
				r.Header.Add("Origin", o)
			}
			if tt.fetch != "" {
				r.Header.Set("Sec-Fetch-Site", tt.fetch)
			}
			if got := SameOrigin(r, public+"/mcp"); got != tt.allowed {
				t.Errorf("SameOrigin = %v, want %v", got, tt.allowed)
			}
		})
	}
}
