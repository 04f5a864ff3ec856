package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
)

// RefuseTokens answers 403 broker_token_refused to a request whose
// bearer token is a broker token, before next (the identity middleware and
// the handlers) runs; other requests pass. A broker token is one whose
// "iss" is brokerIssuer (when set), or whose "scope" or "scp" contains
// mcp:invoke. The header's "typ" (at+jwt) does not decide: other issuers'
// access tokens have it too.
//
// This is a courtesy, not the barrier: it reads the token without
// verifying it, to tell an MCP client plainly that approvals are decided
// by people. The barrier is the identity middleware, which accepts only
// tokens of the organisation's identity provider for Usher's API and so
// never a broker token, with or without this check. A token this cannot
// read (malformed, over identity.MaxTokenBytes) passes on to be refused
// there.
func RefuseTokens(brokerIssuer string, next http.Handler) http.Handler {
	var quoted []byte // the issuer as a JSON string without escapes
	if brokerIssuer != "" {
		quoted = []byte(`"` + brokerIssuer + `"`)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, v := range r.Header.Values("Authorization") {
			scheme, token, _ := strings.Cut(v, " ")
			if strings.EqualFold(scheme, "Bearer") && isBrokerToken(strings.TrimSpace(token), brokerIssuer, quoted) {
				httpx.WriteError(w, r, nil, errRefused)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// errRefused answers a broker token where only a person's token is taken.
var errRefused = httpx.Errorf(http.StatusForbidden, "broker_token_refused",
	"A broker token speaks for a user to the MCP server only: this API is for people signed in to Usher.")

// brokerClaims are the claims isBrokerToken reads; every other claim is
// skipped without being decoded. Names match exactly, as in a map.
type brokerClaims struct {
	Iss   jsontext.Value `json:"iss"`
	Scope jsontext.Value `json:"scope"`
	Scp   jsontext.Value `json:"scp"`
}

// isBrokerToken reads the unverified claims of a JWT and reports whether
// they are a broker token's; quoted is brokerIssuer as a JSON string
// without escapes (nil without an issuer).
func isBrokerToken(token, brokerIssuer string, quoted []byte) bool {
	if len(token) > identity.MaxTokenBytes {
		return false
	}
	_, rest, ok := strings.Cut(token, ".")
	encoded, signature, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(signature, ".") {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(encoded)
	if err != nil || !mayBeBroker(payload, quoted) {
		return false
	}
	var claims brokerClaims
	if jsonv2.Unmarshal(payload, &claims, jsonv2.RejectUnknownMembers(false)) != nil {
		return false
	}
	var iss string
	if brokerIssuer != "" && json.Unmarshal(claims.Iss, &iss) == nil && iss == brokerIssuer {
		return true
	}
	return hasScope(claims.Scope, ScopeInvoke) || hasScope(claims.Scp, ScopeInvoke)
}

// mayBeBroker is isBrokerToken's shortcut past the parsing of the claims
// of other tokens (a person's, with each request to the API): a payload
// without a backslash has no escapes, so each of its strings is written
// as its text, and unless the invoke scope's text or the broker issuer as
// a whole string (quoted, its quotes included: a person's issuer may begin
// with Usher's own URL) is in it, no claim can hold them.
func mayBeBroker(payload, quoted []byte) bool {
	return bytes.IndexByte(payload, '\\') >= 0 || bytes.Contains(payload, []byte(ScopeInvoke)) ||
		(quoted != nil && bytes.Contains(payload, quoted))
}

// hasScope reports whether a scope claim, a space-separated string or an
// array of strings, holds scope.
func hasScope(claim []byte, scope string) bool {
	var s string
	if json.Unmarshal(claim, &s) == nil {
		return slices.Contains(strings.Fields(s), scope)
	}
	var list []string
	if json.Unmarshal(claim, &list) == nil {
		return slices.Contains(list, scope)
	}
	return false
}
