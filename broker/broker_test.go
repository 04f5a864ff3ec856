package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestMintFormat checks the exact header and claims of a minted token.
func TestMintFormat(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kid, _ := f.signer(t)
	tok, err := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience, RunID: "run-7"})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok.Raw, ".")
	if len(parts) != 3 {
		t.Fatalf("%d segments", len(parts))
	}
	var header map[string]any
	decodeJSON(t, parts[0], &header)
	if want := map[string]any{"alg": "RS256", "typ": "at+jwt", "kid": kid}; fmt.Sprint(header) != fmt.Sprint(want) {
		t.Fatalf("header = %v, want %v", header, want)
	}

	var claims map[string]json.RawMessage
	decodeJSON(t, parts[1], &claims)
	now := f.clock.Now().Unix()
	want := map[string]string{
		"iss":       `"https://usher.example.com"`,
		"sub":       `"alice"`,
		"aud":       `"https://usher.example.com/mcp"`, // a string, not an array
		"iat":       fmt.Sprint(now),
		"nbf":       fmt.Sprint(now),
		"exp":       fmt.Sprint(now + 300),
		"jti":       fmt.Sprintf("%q", tok.ID),
		"scope":     `"mcp:invoke"`,
		"client_id": `"usher-assistant"`,
		"act":       `{"sub":"usher-assistant"}`,
		"run_id":    `"run-7"`,
	}
	if len(claims) != len(want) {
		t.Errorf("claims %v, want exactly %v", keys(claims), keys(want))
	}
	for name, w := range want {
		if got := string(claims[name]); got != w {
			t.Errorf("%s = %s, want %s", name, got, w)
		}
	}
	if !tok.Expiry.Equal(time.Unix(now+300, 0)) {
		t.Errorf("Expiry = %s", tok.Expiry)
	}
	if id, err := base64.RawURLEncoding.DecodeString(tok.ID); err != nil || len(id) != 16 {
		t.Errorf("jti %q is not 128 bits in base64url", tok.ID)
	}

	// No run, another client and actor.
	tok2, err := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience, ClientID: "cli", Actor: "bot"})
	if err != nil {
		t.Fatal(err)
	}
	claims = nil
	decodeJSON(t, strings.Split(tok2.Raw, ".")[1], &claims)
	if _, ok := claims["run_id"]; ok {
		t.Error("run_id present without a run")
	}
	if string(claims["client_id"]) != `"cli"` || string(claims["act"]) != `{"sub":"bot"}` {
		t.Errorf("client_id %s, act %s", claims["client_id"], claims["act"])
	}
	if tok2.ID == tok.ID {
		t.Error("two tokens share a jti")
	}
	// The actor defaults to the grant's client.
	tok3, _ := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience, ClientID: "cli"})
	claims = nil
	decodeJSON(t, strings.Split(tok3.Raw, ".")[1], &claims)
	if string(claims["act"]) != `{"sub":"cli"}` {
		t.Errorf("act %s, want the client", claims["act"])
	}
}

// TestMintInterop: a mainstream JWT library accepts minted tokens with its
// strictest settings.
func TestMintInterop(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, key := f.signer(t)
	tok, err := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jwt.Parse(tok.Raw, func(*jwt.Token) (any, error) { return &key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(testIssuer), jwt.WithAudience(testAudience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithStrictDecoding(),
		jwt.WithTimeFunc(f.clock.Now))
	if err != nil || !parsed.Valid {
		t.Fatalf("golang-jwt rejects a minted token: %v", err)
	}
}

func TestMintRequiresSubjectAndAudience(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, g := range []Grant{{Audience: testAudience}, {Subject: "alice"}} {
		if _, err := f.broker.Mint(t.Context(), g); err == nil {
			t.Errorf("Mint(%+v) succeeded", g)
		}
	}
}

func TestMintSizeLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, err := f.broker.Mint(t.Context(), Grant{Subject: strings.Repeat("a", MaxTokenSize), Audience: testAudience})
	if err == nil {
		t.Fatal("minted a token larger than a verifier reads")
	}
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	short, err := NewKeyring(&memKeyStore{}, "broker", testSealKey, &KeyringOptions{MaxTokenLifetime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		keys *Keyring
		opts *Options
		want []string
	}{
		{"nil options", f.keys, nil, []string{"Issuer is required"}},
		{"everything wrong", nil, &Options{Issuer: "usher.example.com", TokenLifetime: 16 * time.Minute},
			[]string{"keyring", "Issuer", "TokenLifetime"}},
		{"issuer with query", f.keys, &Options{Issuer: "https://usher.example.com/?a=b"}, []string{"Issuer"}},
		{"issuer with empty query", f.keys, &Options{Issuer: "https://usher.example.com/?"}, []string{"Issuer"}},
		{"issuer with fragment", f.keys, &Options{Issuer: "https://usher.example.com/#x"}, []string{"Issuer"}},
		{"issuer with user", f.keys, &Options{Issuer: "https://u:p@usher.example.com"}, []string{"Issuer"}},
		{"issuer not http", f.keys, &Options{Issuer: "ftp://usher.example.com"}, []string{"Issuer"}},
		{"negative lifetime", f.keys, &Options{Issuer: testIssuer, TokenLifetime: -time.Minute}, []string{"TokenLifetime"}},
		{"sub-second lifetime", f.keys, &Options{Issuer: testIssuer, TokenLifetime: time.Millisecond}, []string{"TokenLifetime"}},
		{"lifetime over the keyring's", short, &Options{Issuer: testIssuer}, []string{"MaxTokenLifetime"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.keys, tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := New(f.keys, &Options{Issuer: "http://127.0.0.1:8080", TokenLifetime: 15 * time.Minute}); err != nil {
		t.Fatalf("valid options: %v", err)
	}
}

// TestTokenNeverPrinted: no formatting, logging or encoding of a Token
// shows its credential.
func TestTokenNeverPrinted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok, err := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience})
	if err != nil {
		t.Fatal(err)
	}
	sig := tok.Raw[strings.LastIndexByte(tok.Raw, '.')+1:]
	var outputs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%100.3v"} {
		outputs = append(outputs, fmt.Sprintf(verb, tok), fmt.Sprintf(verb, &tok))
	}
	outputs = append(outputs, fmt.Sprint(tok), fmt.Sprintln(tok), fmt.Sprintf("%v", []Token{tok}),
		fmt.Sprintf("%+v", struct{ T Token }{tok}), fmt.Sprintf("%T %v", tok, tok), tok.String(), tok.GoString())
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("minted", "token", tok, "ptr", &tok)
	if !strings.Contains(buf.String(), "token.id="+tok.ID) {
		t.Errorf("slog does not log the token as a group of its id and expiry: %s", buf.String())
	}
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("minted", "token", tok, "ptr", &tok)
	outputs = append(outputs, buf.String())
	js, err := json.Marshal(map[string]any{"t": tok, "p": &tok})
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, string(js))
	for _, out := range outputs {
		if strings.Contains(out, sig) || strings.Contains(out, tok.Raw[:20]) {
			t.Errorf("output shows the token: %s", out)
		}
		if !strings.Contains(out, tok.ID) {
			t.Errorf("output lacks the token ID: %s", out)
		}
	}
}

// TestTokenSource: the source reuses its token and mints a new one a minute
// before expiry.
func TestTokenSource(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ts := f.broker.TokenSource(t.Context(), Grant{Subject: "alice", Audience: testAudience, RunID: "r"})
	first, err := ts.Token()
	if err != nil {
		t.Fatal(err)
	}
	if first.TokenType != "Bearer" || !first.Expiry.Equal(f.clock.Now().Add(5*time.Minute)) {
		t.Fatalf("token type %q, expiry %s", first.TokenType, first.Expiry)
	}
	if _, err := f.verifier.Verify(t.Context(), first.AccessToken); err != nil {
		t.Fatal(err)
	}

	f.clock.Advance(4*time.Minute - time.Second)
	again, err := ts.Token()
	if err != nil {
		t.Fatal(err)
	}
	if again.AccessToken != first.AccessToken {
		t.Fatal("re-minted more than a minute before expiry")
	}

	f.clock.Advance(time.Second)
	renewed, err := ts.Token()
	if err != nil {
		t.Fatal(err)
	}
	if renewed.AccessToken == first.AccessToken || !renewed.Expiry.Equal(f.clock.Now().Add(5*time.Minute)) {
		t.Fatalf("not re-minted a minute before expiry: expiry %s", renewed.Expiry)
	}
	c, err := f.verifier.Verify(t.Context(), renewed.AccessToken)
	if err != nil || c.RunID != "r" || c.Subject != "alice" {
		t.Fatalf("renewed token: %+v, %v", c, err)
	}
}

func decodeJSON(t *testing.T, seg string, v any) {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestMintTenantAndGroups: a grant's tenant and groups travel in "tid" and
// "groups" and come out of Verify; a grant with too many or unfit groups is
// refused at mint rather than cut, which could change a decision.
func TestMintTenantAndGroups(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	groups := []string{"finance", "00000000-0000-0000-0000-000000000001"}
	tok, err := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience, Tenant: "contoso", Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]json.RawMessage
	decodeJSON(t, strings.Split(tok.Raw, ".")[1], &claims)
	if string(claims["tid"]) != `"contoso"` || string(claims["groups"]) != `["finance","00000000-0000-0000-0000-000000000001"]` {
		t.Errorf("tid %s, groups %s", claims["tid"], claims["groups"])
	}
	c, err := f.verifier.Verify(t.Context(), tok.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tenant != "contoso" || !slices.Equal(c.Groups, groups) {
		t.Errorf("verified tenant %q, groups %q", c.Tenant, c.Groups)
	}

	many := make([]string, MaxGroups+1)
	for i := range many {
		many[i] = fmt.Sprintf("group-%d", i)
	}
	refused := []struct {
		name string
		g    Grant
	}{
		{"too many groups", Grant{Groups: many}},
		{"a group too long", Grant{Groups: []string{strings.Repeat("g", MaxClaimLength+1)}}},
		{"an empty group", Grant{Groups: []string{"finance", ""}}},
		{"a group with a newline", Grant{Groups: []string{"finance\nadmins"}}},
		{"a group of invalid UTF-8", Grant{Groups: []string{"\xff"}}},
		{"a tenant too long", Grant{Tenant: strings.Repeat("t", MaxClaimLength+1)}},
		{"a tenant with NUL", Grant{Tenant: "contoso\x00"}},
	}
	for _, tt := range refused {
		tt.g.Subject, tt.g.Audience = "alice", testAudience
		if _, err := f.broker.Mint(t.Context(), tt.g); !errors.Is(err, ErrBadGrant) {
			t.Errorf("Mint with %s: %v, want ErrBadGrant", tt.name, err)
		}
	}
	// The limits themselves are fine.
	if _, err := f.broker.Mint(t.Context(), Grant{Subject: "alice", Audience: testAudience, Groups: many[:MaxGroups], Tenant: strings.Repeat("t", MaxClaimLength)}); err != nil {
		t.Errorf("Mint with %d groups: %v", MaxGroups, err)
	}
}
