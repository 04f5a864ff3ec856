package broker

import "testing"

// A person's claims skip the parsing when they hold neither the invoke
// scope nor the broker issuer as a whole string, even when their issuer
// begins with Usher's URL (the development provider's); anything escaped,
// or holding either, is parsed.
func TestMayBeBroker(t *testing.T) {
	t.Parallel()
	quoted := []byte(`"https://usher.example.com"`)
	for _, c := range []struct {
		payload string
		parse   bool
	}{
		{`{"iss":"https://usher.example.com/dev/oidc","aud":"usher-api","scp":"usher.api"}`, false},
		{`{"iss":"https://login.example.com/t/v2.0","scp":"approvals.decide"}`, false},
		{`{"iss":"https://usher.example.com","sub":"alice"}`, true},
		{`{"aud":"https://usher.example.com"}`, true},
		{`{"scope":"openid mcp:invoke"}`, true},
		{`{"iss":"https:\/\/usher.example.com"}`, true},
		{`{"scope":"mcp\u003ainvoke"}`, true},
	} {
		if got := mayBeBroker([]byte(c.payload), quoted); got != c.parse {
			t.Errorf("mayBeBroker(%s) = %v, want %v", c.payload, got, c.parse)
		}
	}
	if mayBeBroker([]byte(`{"iss":"https://usher.example.com"}`), nil) {
		t.Error("without a broker issuer, an issuer alone made the claims parsed")
	}
}
