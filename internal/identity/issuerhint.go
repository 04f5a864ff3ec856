package identity

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// issuerError explains a token refused for its issuer — found unverified
// in raw, for the log only — when go-oidc refused it as "id token issued
// by a different provider" (its words for any token) or for another
// reason that is not the issuer's: err otherwise.
func (v *Verifier) issuerError(raw string, err error) error {
	var c struct {
		Issuer string `json:"iss"`
		Tenant string `json:"tid"`
	}
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return err
	}
	payload, derr := base64.RawURLEncoding.DecodeString(parts[1])
	if derr != nil || json.Unmarshal(payload, &c) != nil || c.Issuer == "" || v.issuerAccepted(c.Issuer, c.Tenant) {
		return err
	}
	return fmt.Errorf("issuer %q is not %q%s", c.Issuer, v.issuer, issuerHint(c.Issuer))
}

// issuerHint says what a refused issuer means when it is the v1.0 form of
// an Entra issuer: the API's app registration issues v1.0 access tokens,
// the likeliest first-day mistake.
func issuerHint(iss string) string {
	u, err := url.Parse(iss)
	if err != nil || !strings.EqualFold(u.Host, "sts.windows.net") {
		return ""
	}
	return ": it is the v1.0 form sts.windows.net/{tid}/: set \"requestedAccessTokenVersion\": 2 in the API app registration's manifest"
}
