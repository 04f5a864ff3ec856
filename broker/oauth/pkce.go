package oauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
)

// challengeLen is the length of an S256 code challenge: the base64url form,
// unpadded, of a 32-byte SHA-256 hash.
const challengeLen = 43

// Limits of a code verifier (RFC 7636 §4.1).
const (
	minVerifierLen = 43
	maxVerifierLen = 128
)

// CheckChallenge accepts the PKCE parameters of an authorization request
// (RFC 7636 §4.3): method must be S256 — "plain" offers no protection against
// a stolen code and OAuth 2.1 does not want it, and an absent method means
// plain (§4.3) —, and challenge 43 base64url characters decoding to 32
// bytes. It returns the invalid_request *Error the authorization endpoint
// answers with (redirectable: by then the client and redirect URI are
// known), or nil.
func CheckChallenge(method, challenge string) error {
	switch {
	case challenge == "" && method == "":
		return newError(CodeInvalidRequest, "code_challenge is required: PKCE with code_challenge_method S256.", true)
	case challenge == "":
		return newError(CodeInvalidRequest, "code_challenge is required.", true)
	case method == "":
		return newError(CodeInvalidRequest, "code_challenge_method is required and must be S256 (plain is not supported).", true)
	case method == "plain":
		return newError(CodeInvalidRequest, "code_challenge_method plain is not supported: use S256.", true)
	case method != MethodS256:
		return newError(CodeInvalidRequest, "code_challenge_method must be S256.", true)
	case !validChallenge(challenge):
		return newError(CodeInvalidRequest, "code_challenge must be the unpadded base64url SHA-256 of the verifier (43 characters).", true)
	}
	return nil
}

// validChallenge reports whether c is 43 base64url characters that decode,
// strictly (no stray bits), to 32 bytes.
func validChallenge(c string) bool {
	if len(c) != challengeLen {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	return err == nil && len(b) == sha256.Size
}

// CheckVerifier accepts a token request's code_verifier of RFC 7636
// §4.1's form: 43 to 128 characters of the unreserved set [A-Za-z0-9-._~].
// It returns the invalid_request *Error the token endpoint answers with,
// or nil: a verifier of another form is a malformed request (RFC 6749
// §5.2), whatever challenge it might hash to, not one that failed to match.
func CheckVerifier(verifier string) error {
	if !validVerifier(verifier) {
		return newError(CodeInvalidRequest, "code_verifier must be 43 to 128 characters of A-Z, a-z, 0-9 and '-', '.', '_', '~' (RFC 7636).", false)
	}
	return nil
}

// VerifyPKCE reports whether verifier answers the S256 challenge (RFC 7636
// §4.6): verifier is 43 to 128 characters of the unreserved set
// [A-Za-z0-9-._~] (§4.1), and the base64url SHA-256 of it equals challenge,
// compared in constant time. A malformed challenge matches nothing.
func VerifyPKCE(verifier, challenge string) bool {
	if !validVerifier(verifier) || !validChallenge(challenge) {
		return false
	}
	sum := sha256.Sum256([]byte(verifier))
	got := base64.RawURLEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(got), []byte(challenge)) == 1
}

// validVerifier checks RFC 7636 §4.1's code-verifier ABNF.
func validVerifier(v string) bool {
	if len(v) < minVerifierLen || len(v) > maxVerifierLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !unreserved(v[i]) {
			return false
		}
	}
	return true
}

// unreserved reports whether c is in RFC 3986's unreserved set.
func unreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
