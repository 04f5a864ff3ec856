package clientmeta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// result is a successful fetch: the document and how to cache it.
type result struct {
	doc     *Document
	etag    string
	ttl     time.Duration
	noStore bool
}

// get fetches clientID's document, revalidating stale when it has an ETag.
func (f *Fetcher) get(ctx context.Context, clientID string, stale entry) (result, *Error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientID, nil)
	if err != nil {
		return result{}, fail("the client_id is not a URL", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "Usher-client-metadata-fetcher")
	if stale.doc != nil && stale.etag != "" {
		req.Header.Set("If-None-Match", stale.etag)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return result{}, transportError(err)
	}
	defer resp.Body.Close()
	ttl, noStore := f.lifetime(resp.Header)
	switch {
	case resp.StatusCode == http.StatusNotModified && stale.doc != nil && stale.etag != "":
		return result{doc: stale.doc, etag: orDefault(resp.Header.Get("ETag"), stale.etag), ttl: ttl, noStore: noStore}, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.StatusCode != http.StatusNotModified:
		return result{}, refuse("the client metadata document URL redirects, and redirects are not followed")
	case resp.StatusCode != http.StatusOK:
		return result{}, refuse(fmt.Sprintf("the client metadata document URL answered HTTP %d", resp.StatusCode))
	}
	if !isJSONType(resp.Header.Get("Content-Type")) {
		return result{}, refuse("the client metadata document is not served as application/json")
	}
	body, ferr := f.readBody(resp)
	if ferr != nil {
		return result{}, ferr
	}
	if err := ctx.Err(); err != nil {
		// The transport may end a body cut short by the deadline with a
		// plain EOF: a body read past the deadline is never trusted.
		return result{}, transportError(context.Cause(ctx))
	}
	doc, ferr := parseDocument(clientID, body)
	if ferr != nil {
		return result{}, ferr
	}
	return result{doc: doc, etag: resp.Header.Get("ETag"), ttl: ttl, noStore: noStore}, nil
}

// readBody reads the whole body, refusing one over MaxBodyBytes rather
// than truncating it.
func (f *Fetcher) readBody(resp *http.Response) ([]byte, *Error) {
	limit := f.opts.MaxBodyBytes
	if resp.ContentLength > limit {
		return nil, refuse("the client metadata document is too large")
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, transportError(err)
	}
	if int64(len(body)) > limit {
		return nil, refuse("the client metadata document is too large")
	}
	return body, nil
}

// transportError turns a failed request or body read into an Error whose
// reason says what kind of failure it was, never the dialer's text.
func transportError(err error) *Error {
	var addrErr *addressError
	var resErr *resolveError
	switch {
	case errors.As(err, &addrErr):
		return fail("the client_id's host is not a public address", err)
	case errors.Is(err, context.DeadlineExceeded):
		return fail("fetching the client metadata document timed out", err)
	case errors.As(err, &resErr):
		return fail("the client_id's host name could not be resolved", err)
	default:
		return fail("the client metadata document could not be fetched", err)
	}
}

// isJSONType accepts application/json and application/<subtype>+json
// (draft §4), with any parameters.
func isJSONType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	sub, ok := strings.CutPrefix(mt, "application/")
	return ok && (sub == "json" || (strings.HasSuffix(sub, "+json") && len(sub) > len("+json")))
}

// lifetime returns how long a response may be cached: its Cache-Control
// max-age clamped to [MinTTL, MaxTTL], MinTTL without one (and for
// no-cache, which the floor overrides: a client must not make Usher fetch
// on every request); noStore for no-store, which is always honoured.
func (f *Fetcher) lifetime(h http.Header) (ttl time.Duration, noStore bool) {
	ttl = f.opts.MinTTL
	for _, v := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(v, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(d), "=")
			switch strings.ToLower(name) {
			case "no-store":
				noStore = true
			case "max-age":
				if n, err := strconv.ParseInt(strings.Trim(value, `"`), 10, 64); err == nil && n >= 0 {
					ttl = time.Duration(min(n, int64(f.opts.MaxTTL/time.Second))) * time.Second
				}
			}
		}
	}
	return min(max(ttl, f.opts.MinTTL), f.opts.MaxTTL), noStore
}
