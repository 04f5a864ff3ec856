package httpx

import "testing"

func TestCheckEndpoint(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://login.example.com/tenant/v2.0": true,
		"http://127.0.0.1:8080/dev/oidc":        true,
		"http://localhost/x":                    true,
		"http://usher.example.com":              false,
		"ftp://usher.example.com":               false,
		"/relative":                             false,
		"https://user@usher.example.com":        false,
		"https://usher.example.com/?q=1":        false,
		"https://usher.example.com/#":           false,
		"https://usher.example.com/#frag":       false,
		"::":                                    false,
	} {
		if err := CheckEndpoint(raw); (err == nil) != ok {
			t.Errorf("CheckEndpoint(%q) = %v, want ok %v", raw, err, ok)
		}
	}
}
