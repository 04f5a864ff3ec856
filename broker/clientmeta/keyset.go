package clientmeta

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// FetchKeySet fetches the JSON Web Key Set at uri — the jwks_uri of a
// client that authenticates with private_key_jwt — under a document's
// rules: uri is checked as a client_id is ([Fetcher.CheckClientID]: https,
// or http to a loopback host with AllowLoopbackHTTP), the addresses are
// checked before and at dialling, redirects are refused, the whole fetch
// takes at most Options.Timeout, the body at most Options.MaxBodyBytes and
// its Content-Type is JSON. It returns the body, unparsed, and how long it
// may be used: its Cache-Control max-age clamped to [Options.MinTTL,
// Options.MaxTTL] (no-store: MinTTL, the shortest a caller keeps a set).
// FetchKeySet does not cache; the caller does. Every error is an *Error.
func (f *Fetcher) FetchKeySet(ctx context.Context, uri string) ([]byte, time.Duration, error) {
	if err := checkClientID(uri, f.opts.AllowLoopbackHTTP); err != nil {
		return nil, 0, refuse("the jwks_uri is not acceptable: " + err.Reason)
	}
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, 0, fail("the jwks_uri is not a URL", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	req.Header.Set("User-Agent", "Usher-client-metadata-fetcher")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, 0, keySetError(transportError(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, 0, refuse("the jwks_uri redirects, and redirects are not followed")
	case resp.StatusCode != http.StatusOK:
		return nil, 0, refuse(fmt.Sprintf("the jwks_uri answered HTTP %d", resp.StatusCode))
	case !isJSONType(resp.Header.Get("Content-Type")):
		return nil, 0, refuse("the key set is not served as JSON")
	}
	body, ferr := f.readBody(resp)
	if ferr != nil {
		return nil, 0, keySetError(ferr)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, keySetError(transportError(context.Cause(ctx)))
	}
	ttl, _ := f.lifetime(resp.Header)
	return body, ttl, nil
}

// keySetError is e, said of the key set rather than of a document.
func keySetError(e *Error) *Error {
	r := strings.NewReplacer("the client_id's host", "the jwks_uri's host", "the client metadata document", "the key set")
	return &Error{Reason: r.Replace(e.Reason), Cause: e.Cause}
}
