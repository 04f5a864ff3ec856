package identity_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/usherhq/usher/internal/identity"
)

// syncBuffer collects log output written from server goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMiddleware(t *testing.T) {
	ti := newTestIssuer(t)
	clk := newClock()
	var logs syncBuffer
	opts := singleTenantOptions(ti, clk)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	v, err := identity.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := identity.FromContext(r.Context())
		if !ok {
			http.Error(w, "no principal", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, p.ID())
	})))
	t.Cleanup(api.Close)

	token := func(edit func(map[string]any)) string {
		c := entraClaims(ti.URL(), clk.Now())
		if edit != nil {
			edit(c)
		}
		return sign(t, ti.key, goodKID, c)
	}
	good := token(nil)
	otherTenant := token(func(c map[string]any) { c["tid"] = tenantB })
	noScope := token(func(c map[string]any) { c["scp"] = "Sessions.Read" })
	wrongAudience := token(func(c map[string]any) { c["aud"] = webClientID })
	overage := token(groupsOverage)

	tests := []struct {
		name         string
		query        string
		header       []string
		status       int
		challenge    string
		code         string
		loggedReason string
		leakedToken  string
	}{
		{name: "good token", header: []string{"Bearer " + good}, status: 200},
		{name: "scheme is case-insensitive", header: []string{"bearer " + good}, status: 200},
		{name: "no Authorization header", status: 401, challenge: "Bearer", code: "unauthenticated", loggedReason: "no bearer token"},
		{name: "basic credentials", header: []string{"Basic dXNlcjpwYXNz"}, status: 401, challenge: "Bearer", code: "unauthenticated"},
		{name: "two Authorization headers", header: []string{"Bearer " + good, "Bearer " + good}, status: 401,
			challenge: `Bearer error="invalid_token"`, code: "unauthenticated", loggedReason: "more than one"},
		{name: "token in the query string only", query: "?access_token=" + good, status: 400,
			challenge: `Bearer error="invalid_request"`, code: "invalid_request", leakedToken: good},
		{name: "token in the query string next to a good header", query: "?access_token=x", header: []string{"Bearer " + good},
			status: 400, challenge: `Bearer error="invalid_request"`, code: "invalid_request"},
		{name: "garbage token", header: []string{"Bearer not-a-token"}, status: 401,
			challenge: `Bearer error="invalid_token"`, code: "unauthenticated", leakedToken: "not-a-token"},
		{name: "wrong audience", header: []string{"Bearer " + wrongAudience}, status: 401,
			challenge: `Bearer error="invalid_token"`, code: "unauthenticated", loggedReason: "audience", leakedToken: wrongAudience},
		{name: "missing scope", header: []string{"Bearer " + noScope}, status: 403,
			challenge: `Bearer error="insufficient_scope", scope="usher.api"`, code: "insufficient_scope", loggedReason: "scope", leakedToken: noScope},
		{name: "tenant not allowed", header: []string{"Bearer " + otherTenant}, status: 403,
			code: "forbidden", loggedReason: "tenant", leakedToken: otherTenant},
		{name: "groups overage", header: []string{"Bearer " + overage}, status: 403,
			code: "too_many_groups", loggedReason: `level=WARN msg="identity: request refused" method=GET path=/api/assistant/runs reason="identity: forbidden: groups overage: the token does not list the person's groups because there are too many; in Entra ID, set the API app registration's groupMembershipClaims to \"ApplicationGroup\"`,
			leakedToken: overage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, api.URL+"/api/assistant/runs"+tt.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range tt.header {
				req.Header.Add("Authorization", h)
			}
			resp, err := api.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status == 200 {
				if want := ti.URL() + "|" + tenantA + "|" + userOID; string(body) != want {
					t.Errorf("principal %q, want %q", body, want)
				}
				return
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != tt.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tt.challenge)
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != tt.code || e.Error.Message == "" {
				t.Errorf("body %s, want error code %q", body, tt.code)
			}
			// A sentence, as every API error's message is; an invalid token
			// is told what /mcp tells it.
			if m := e.Error.Message; m == "" || !unicode.IsUpper([]rune(m)[0]) || !strings.HasSuffix(m, ".") {
				t.Errorf("message %q is not a sentence", m)
			}
			if want := "The access token is invalid or expired."; tt.challenge == `Bearer error="invalid_token"` && e.Error.Message != want {
				t.Errorf("message %q, want %q", e.Error.Message, want)
			}
			for _, secret := range []string{tt.leakedToken, good} {
				if secret != "" && (strings.Contains(string(body), secret) || strings.Contains(logs.String(), secret)) {
					t.Errorf("a token appears in the response or the log")
				}
			}
			if tt.loggedReason != "" && !strings.Contains(logs.String(), tt.loggedReason) {
				t.Errorf("log %q does not give the reason %q", logs.String(), tt.loggedReason)
			}
		})
	}
}

func TestContext(t *testing.T) {
	if _, ok := identity.FromContext(t.Context()); ok {
		t.Fatal("FromContext found a principal in an empty context")
	}
	p := identity.Principal{Issuer: "https://issuer.example", ObjectID: "o"}
	got, ok := identity.FromContext(identity.NewContext(t.Context(), p))
	if !ok || got.ID() != "https://issuer.example||o" {
		t.Fatalf("FromContext = %+v, %v", got, ok)
	}
}
