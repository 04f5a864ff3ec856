package testenv

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// StreamBeforeBodyEnd checks a reverse proxy: a backend answers a POST
// with a response stream as soon as it has read the request's body,
// before the proxy's transport has read past the body's end (Go's
// transport reads once more after the declared length, to check that the
// body ends there). That read is held until the client has the response's
// headers: the order in which Go's HTTP/1 server, which closes a request's
// body once its handler begins the response, made the read fail and the
// transport close its connection to the backend, cutting the stream
// (golang/go#40747). The stream must go on to its end, and the read find
// the body's end.
//
// start starts the proxy in front of backend, with the transport that
// wrap makes of the one it would use, and returns the URL to post to.
func StreamBeforeBodyEnd(t *testing.T, start func(backend string, wrap func(http.RoundTripper) http.RoundTripper) string) {
	t.Helper()
	headers := make(chan struct{})  // the client has the response's headers
	pastEnd := make(chan error, 1)  // what the read past the body's end gave
	readPast := make(chan struct{}) // it has returned
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("the backend reading the body: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-readPast:
		case <-r.Context().Done():
			return // the proxy closed the connection: the stream is cut
		}
		_, _ = io.WriteString(w, "data: two\n\n")
	}))
	t.Cleanup(backend.Close)
	url := start(backend.URL, func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			out := r.Clone(r.Context())
			out.Body = &heldEnd{body: r.Body, left: r.ContentLength, hold: headers, gave: pastEnd, done: readPast}
			return next.RoundTrip(out)
		})
	})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // ends only a test that would hang
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	close(headers)
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "data: one\n\ndata: two\n\n" {
		t.Errorf("the stream through the proxy: %q, %v; want both events and its end", body, err)
	}
	if err := <-pastEnd; err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("the proxy's transport reading past the body's end: %v, want its end", err)
	}
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// heldEnd is a request body whose read after its left bytes (a transport's
// read past the declared length) waits until hold closes; what that read
// gives is sent on gave, and done closes after it.
type heldEnd struct {
	body io.ReadCloser
	left int64
	hold <-chan struct{}
	gave chan<- error
	done chan struct{}
}

func (h *heldEnd) Read(p []byte) (int, error) {
	if h.left > 0 {
		n, err := h.body.Read(p[:min(int64(len(p)), h.left)])
		h.left -= int64(n)
		return n, err
	}
	<-h.hold
	n, err := h.body.Read(p)
	select {
	case h.gave <- err:
		close(h.done)
	default: // read past the end again
	}
	return n, err
}

func (h *heldEnd) Close() error { return h.body.Close() }
