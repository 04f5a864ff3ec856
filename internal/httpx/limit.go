package httpx

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// LimitBody caps every request body at max bytes. A handler that reads past
// the cap gets an *http.MaxBytesError, which it reports as ErrBodyTooLarge; a
// declared Content-Length over the cap is refused before the handler runs.
func LimitBody(max int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			WriteError(w, r, nil, ErrBodyTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}

// errBodyUnreadable answers a body that ended early or is malformed (bad
// chunked encoding, say).
var errBodyUnreadable = &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "The request body could not be read."}

// ReadBody reads every request body whole, at most max bytes and within
// timeout, before next runs, so that a client that sends its body slowly
// holds a connection and a goroutine for timeout at most:
//
//   - a body over max bytes is refused with 413 ErrBodyTooLarge (a declared
//     Content-Length over it before anything is read, as [LimitBody]);
//   - a body not received within timeout is refused with 408
//     ErrRequestTimeout, and the connection is closed;
//   - next reads the body from memory.
//
// The timeout is a read deadline on the connection, set when the request's
// headers are in and lifted once its body is: it never reaches what comes
// after, such as a long-lived response. A request without a body (a
// live-update stream, a WebSocket upgrade) passes untouched, so a
// WebSocket's reads keep their own deadlines. Wrap the server's handler
// with it, outside any ResponseWriter wrapper without Unwrap.
func ReadBody(max int64, timeout time.Duration, next http.Handler) http.Handler {
	return ReadBodyFor(max, timeout, nil, next)
}

// Refusal answers a request refused with e, in the shape its endpoint's
// clients read: [ReadBodyFor] refuses bodies with it.
type Refusal func(w http.ResponseWriter, r *http.Request, e *Error)

// WriteRefusal is the Refusal in the API's error shape, [WriteError]'s.
func WriteRefusal(w http.ResponseWriter, r *http.Request, e *Error) { WriteError(w, r, nil, e) }

// ReadBodyFor is [ReadBody] whose refusals — ErrBodyTooLarge,
// ErrRequestTimeout and an unreadable body's 400 — refuse writes, so that
// endpoints of another protocol (OAuth's) answer in their own error
// shape; nil is WriteRefusal.
func ReadBodyFor(max int64, timeout time.Duration, refuse Refusal, next http.Handler) http.Handler {
	if refuse == nil {
		refuse = WriteRefusal
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			refuse(w, r, ErrBodyTooLarge)
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		rc := http.NewResponseController(w)
		// Without a connection underneath (a recorder in a test), the body
		// is read without a deadline.
		deadline := rc.SetReadDeadline(time.Now().Add(timeout)) == nil
		body, err := readAll(r.Body, r.ContentLength)
		if err != nil {
			var tooLarge *http.MaxBytesError
			var netErr net.Error
			switch {
			case errors.As(err, &tooLarge):
				refuse(w, r, ErrBodyTooLarge)
			case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
				w.Header().Set("Connection", "close")
				refuse(w, r, ErrRequestTimeout)
			default:
				refuse(w, r, errBodyUnreadable)
			}
			return
		}
		// Lift the deadline now that the body is in: the server watches
		// the idle connection for the client going away, and that watch
		// reaching the deadline would end the request's context.
		if deadline {
			_ = rc.SetReadDeadline(time.Time{})
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// readAll reads body to its end, sized by its declared length when there
// is one.
func readAll(body io.Reader, declared int64) ([]byte, error) {
	var buf bytes.Buffer
	if declared > 0 {
		buf.Grow(int(declared))
	}
	_, err := buf.ReadFrom(body)
	return buf.Bytes(), err
}
