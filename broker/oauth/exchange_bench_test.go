//go:build unix

package oauth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/usherhq/usher/broker/oauth"
)

// benchExchanger is the client of BenchmarkTokenEndpoint's token exchange:
// confidential, and listed in its server's ExchangeClients.
const benchExchanger = "usher-bench-exchanger"

// benchExchangerSecret is benchExchanger's client secret.
const benchExchangerSecret = "bench-exchanger-secret-0123456789abcdef"

// exchangeClient is benchExchanger, configured in the server with its
// secret (see newBenchEnv), and written to the store as serve writes it.
func (e *benchEnv) exchangeClient() client {
	if err := e.server.PutConfiguredClients(context.Background()); err != nil {
		e.tb.Fatal(err)
	}
	return client{ID: benchExchanger, Secret: benchExchangerSecret}
}

// exchange exchanges subject, an access token for the API, as the
// confidential client c, and checks that it answers an access token and no
// refresh token.
func (e *benchEnv) exchange(c client, subject string) {
	form := url.Values{
		"grant_type": {oauth.GrantTokenExchange}, "subject_token": {subject},
		"subject_token_type": {oauth.TokenTypeAccessToken}, "resource": {e.resource},
	}
	basic := base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(c.ID) + ":" + url.QueryEscape(c.Secret)))
	resp, body := e.do(http.MethodPost, oauth.PathToken, form, "", "Authorization", "Basic "+basic)
	var a exchangeAnswer
	if err := json.Unmarshal(body, &a); err != nil || resp.StatusCode != http.StatusOK || a.AccessToken == "" || a.RefreshToken != "" {
		e.tb.Fatalf("exchange answer %d %s (%v)", resp.StatusCode, body, err)
	}
}
