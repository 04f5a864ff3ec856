package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// The stateless endpoint answers each POST of a request on a stream of
// its own (Server-Sent Events), and the Go SDK ends that stream only after
// it has closed the session it made for the request, some time after the
// response's event went out. An HTTP/1.1 client that has read the response
// and closes the stream before its end arrives (the Go SDK's client does)
// cannot use the connection again: the next call opens a new one, a TCP
// and, in production, a TLS handshake on both sides. serveToResponse ends
// the HTTP response with the event instead: the event and the end of the
// chunked body go out in one write, and the SDK's session closes after,
// its writes dropped.

// errResponseEnded answers a write after the response ended.
var errResponseEnded = errors.New("mcpserver: the response has ended")

// serveToResponse serves r, a POST, through next; when id is not nil (r
// is one JSON-RPC request with that id, served statelessly), it ends the
// HTTP response as soon as next has written the event that carries the
// response to that request (see the comment above), and next goes on in a
// goroutine of s.warm, which Drain waits for.
func (s *Server) serveToResponse(w http.ResponseWriter, r *http.Request, id []byte, next http.Handler) {
	if id == nil {
		next.ServeHTTP(w, r)
		return
	}
	ew := &endingWriter{w: w, id: id, ended: make(chan struct{})}
	sent := make(chan struct{})
	defer close(sent)
	r = r.WithContext(context.WithValue(r.Context(), responseSentKey{}, (<-chan struct{})(sent)))
	done := make(chan any, 1)
	s.detached.Add(1)
	s.warm.Go(func() {
		defer s.detached.Done()
		defer func() {
			// A panic before the cut is net/http's, raised on its
			// goroutine as if next had run there; after, it is logged.
			p := recover()
			ew.mu.Lock()
			cut := ew.cutOff
			if !cut {
				done <- p // buffered: sent before any cut, so a cut sees it
			}
			ew.mu.Unlock()
			if cut {
				s.logLatePanic(p)
			}
		}()
		next.ServeHTTP(ew, r)
	})
	select {
	case p := <-done:
		if p != nil {
			panic(p)
		}
	case <-ew.ended:
		ew.cut()
		select {
		case p := <-done: // next ended before the cut
			s.logLatePanic(p)
		default:
		}
	}
}

// responseSentKey is the context key of the channel that closes when the
// response to a stateless request has been handed to net/http to send
// (serveToResponse returned).
type responseSentKey struct{}

// responseSent returns the channel that closes once the response to ctx's
// request is on its way, or nil when ctx's request has none (a stateful
// session, a request served without serveToResponse).
func responseSent(ctx context.Context) <-chan struct{} {
	sent, _ := ctx.Value(responseSentKey{}).(<-chan struct{})
	return sent
}

// logLatePanic logs p, a panic of the SDK's handler after its response
// ended, if it is one.
func (s *Server) logLatePanic(p any) {
	if p != nil && p != http.ErrAbortHandler {
		s.log.Error("mcpserver: the MCP SDK's handler panicked after the response", "panic", fmt.Sprint(p))
	}
}

// peekRequest returns the id of body's JSON-RPC request (nil for a
// notification, a response, or what is not one JSON-RPC message), compact,
// and its method ("" for a response).
func peekRequest(body []byte) (id []byte, method string) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(body, &m) != nil {
		return nil, ""
	}
	if m.Method == "" || len(m.ID) == 0 || string(m.ID) == "null" {
		return nil, m.Method
	}
	var compact bytes.Buffer
	if json.Compact(&compact, m.ID) != nil {
		return nil, m.Method
	}
	return compact.Bytes(), m.Method
}

// endingWriter passes next's response through to w until the event that
// carries the response to request id is written: it then holds back that
// event's flush (the handler's return flushes it with the end of the body),
// closes ended, and once cut, drops everything next writes after.
type endingWriter struct {
	w  http.ResponseWriter
	id []byte

	mu     sync.Mutex
	header http.Header // next's, once cut: w's is net/http's again
	over   bool        // the response's event has been written
	cutOff bool
	ended  chan struct{}
}

func (e *endingWriter) Header() http.Header {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cutOff {
		if e.header == nil {
			e.header = http.Header{}
		}
		return e.header
	}
	return e.w.Header()
}

func (e *endingWriter) WriteHeader(code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.cutOff {
		e.w.WriteHeader(code)
	}
}

func (e *endingWriter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cutOff || e.over {
		return 0, errResponseEnded
	}
	n, err := e.w.Write(p)
	if err == nil && isResponseEvent(p, e.id) {
		e.over = true
		close(e.ended)
	}
	return n, err
}

// Flush flushes what next wrote, but for the response's event, which the
// end of the response flushes.
func (e *endingWriter) Flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cutOff || e.over {
		return
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

// cut ends the writer's passing through: the handler is about to return.
func (e *endingWriter) cut() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cutOff = true
}

// isResponseEvent reports whether p is one Server-Sent Event whose data is
// the JSON-RPC response (a result or an error) to request id, as the SDK
// encodes one: "jsonrpc", then "id", then "result" or "error". It reads
// the start of the data only, however large the result; anything written
// otherwise is not taken for the response, and the handler's return ends
// the response as it would without serveToResponse.
func isResponseEvent(p, id []byte) bool {
	body, ok := bytes.CutSuffix(p, []byte("\n\n"))
	if !ok {
		return false
	}
	var data []byte
	if d, ok := bytes.CutPrefix(body, []byte("data: ")); ok {
		data = d
	} else if i := bytes.Index(body, []byte("\ndata: ")); i >= 0 {
		if bytes.Contains(body[:i], []byte("\n\n")) {
			return false // a second event
		}
		data = body[i+len("\ndata: "):]
	} else {
		return false
	}
	if bytes.IndexByte(data, '\n') >= 0 {
		return false // more lines: more data, or another event
	}
	rest, ok := bytes.CutPrefix(data, []byte(`{"jsonrpc":"2.0","id":`))
	if !ok {
		return false
	}
	if rest, ok = bytes.CutPrefix(rest, id); !ok {
		return false
	}
	return bytes.HasPrefix(rest, []byte(`,"result":`)) || bytes.HasPrefix(rest, []byte(`,"error":`))
}

// waitGroup waits for wg, or until ctx ends, with ctx's error; wg done by
// then is nil.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done:
			return nil
		default:
			return ctx.Err()
		}
	}
}
