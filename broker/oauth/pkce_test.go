package oauth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/usherhq/usher/broker/oauth"
)

// The example of RFC 7636 Appendix B.
const (
	rfcVerifier  = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
	rfcChallenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
)

func TestCheckChallenge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, challenge string
		wantDescription         string // "" for success
	}{
		{"S256", "S256", rfcChallenge, ""},
		{"missing", "", "", "code_challenge is required: PKCE with code_challenge_method S256."},
		{"method without challenge", "S256", "", "code_challenge is required."},
		{"challenge without method means plain", "", rfcChallenge, "code_challenge_method is required and must be S256 (plain is not supported)."},
		{"plain", "plain", rfcVerifier, "code_challenge_method plain is not supported: use S256."},
		{"lower-case s256", "s256", rfcChallenge, "code_challenge_method must be S256."},
		{"unknown method", "S512", rfcChallenge, "code_challenge_method must be S256."},
		{"too short", "S256", rfcChallenge[:42], "code_challenge must be the unpadded base64url SHA-256 of the verifier (43 characters)."},
		{"too long", "S256", rfcChallenge + "A", "code_challenge must be the unpadded base64url SHA-256 of the verifier (43 characters)."},
		{"padded", "S256", rfcChallenge[:42] + "=", "code_challenge must be the unpadded base64url SHA-256 of the verifier (43 characters)."},
		{"standard base64 alphabet", "S256", strings.ReplaceAll(rfcChallenge, "-", "+"), "code_challenge must be the unpadded base64url SHA-256 of the verifier (43 characters)."},
		{"stray low bits in the last character", "S256", rfcChallenge[:42] + "N", "code_challenge must be the unpadded base64url SHA-256 of the verifier (43 characters)."},
		{"43 bytes of multibyte text", "S256", strings.Repeat("é", 21) + "A", "code_challenge must be the unpadded base64url SHA-256 of the verifier (43 characters)."},
		{"NUL", "S256", rfcChallenge[:42] + "\x00", "code_challenge must be the unpadded base64url SHA-256 of the verifier (43 characters)."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := oauth.CheckChallenge(tt.method, tt.challenge)
			if tt.wantDescription == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var e *oauth.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v, want an *oauth.Error", err)
			}
			if e.Code != oauth.CodeInvalidRequest || e.Status != 400 || !e.Redirectable || e.Description != tt.wantDescription {
				t.Errorf("got %+v, want invalid_request %q", e, tt.wantDescription)
			}
		})
	}
}

func TestVerifyPKCE(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 128)
	longChallenge := "aDbPE7rEAOkQUHHNavRwhN-srU5eMCyUv-0k4BOvtz4" // S256 of long
	tests := []struct {
		name, verifier, challenge string
		want                      bool
	}{
		{"RFC 7636 example", rfcVerifier, rfcChallenge, true},
		{"128 characters", long, longChallenge, true},
		{"wrong verifier", strings.Replace(rfcVerifier, "d", "e", 1), rfcChallenge, false},
		{"verifier is the challenge (plain)", rfcChallenge, rfcChallenge, false},
		{"42 characters", rfcVerifier[:42], rfcChallenge, false},
		{"129 characters", long + "a", longChallenge, false},
		{"reserved character", rfcVerifier[:42] + "+", rfcChallenge, false},
		{"space", rfcVerifier[:42] + " ", rfcChallenge, false},
		{"non-ASCII", rfcVerifier[:41] + "é", rfcChallenge, false},
		{"empty", "", rfcChallenge, false},
		{"empty challenge", rfcVerifier, "", false},
		{"malformed challenge", rfcVerifier, rfcChallenge + "=", false},
		{"upper-case challenge", rfcVerifier, strings.ToUpper(rfcChallenge), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := oauth.VerifyPKCE(tt.verifier, tt.challenge); got != tt.want {
				t.Errorf("VerifyPKCE(%q, %q) = %v, want %v", tt.verifier, tt.challenge, got, tt.want)
			}
		})
	}
}

func FuzzVerifyPKCE(f *testing.F) {
	f.Add(rfcVerifier, rfcChallenge)
	f.Add(strings.Repeat("~", 43), rfcChallenge)
	f.Fuzz(func(t *testing.T, verifier, challenge string) {
		if oauth.VerifyPKCE(verifier, challenge) && oauth.CheckChallenge("S256", challenge) != nil {
			t.Errorf("verified against a challenge CheckChallenge refuses: %q", challenge)
		}
	})
}
