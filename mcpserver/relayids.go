package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/usherhq/usher/internal/seal"
	"github.com/usherhq/usher/store"
)

// The ids of the requests a session kept in Options.Sessions sends its
// client (an upstream's sampling or elicitation, relayed) are sealed
// under Options.Secret as they leave, whichever replica sends them: the
// client sees an opaque string that names the session's record, its
// principal and the session's own id of the request, and expires after
// Options.InputLifetime. The client's answer, which may reach any
// replica, is taken only if its id opens, is the session's and its
// principal's: the answer goes on with the session's own id, and the
// copy of the session that sent the request matches it. Any other answer
// is refused with a JSON-RPC error and audited (KindAnswerRefused);
// nothing reaches the upstream.

// KindAnswerRefused: a client's answer to a request of its session was
// refused, because its request id was not one the session sent (forged
// or altered), has expired, or was sent to another session or principal
// (Event.Reasons says which). Nothing of the answer is recorded.
const KindAnswerRefused = "answer_refused"

// maxRelayedID bounds a sealed request id that is opened.
const maxRelayedID = 1024

// relayedID is what the id of a request a session sends its client seals.
type relayedID struct {
	Session   string          `json:"s"` // the session's record id
	Principal string          `json:"p"` // the session's principal
	ID        json.RawMessage `json:"i"` // the session's own id of the request
}

// newIDSealer returns the sealer of the relayed requests' ids.
func newIDSealer(secret []byte, previous ...[]byte) (*seal.Sealer, error) {
	return seal.NewRotated(secret, previous, "usher/mcp/v1", "usher/mcp/request-id", maxRelayedID)
}

// errAnswerRefused is the message of a refused answer: the same whatever
// the reason, which only the audit record names.
const errAnswerRefused = "The answer's request id is not one this session was sent, or it has expired: the answer was not delivered."

// openAnswer checks the id of a POST that answers a request of the
// session rec (a JSON-RPC response) and gives the body the session's own
// id of the request. An answer whose id does not open, has expired, or is
// another session's or principal's is refused with a JSON-RPC error and
// audited; openAnswer then reports false.
func (d *durableSessions) openAnswer(w http.ResponseWriter, r *http.Request, rec store.MCPSession) bool {
	if r.Body == nil {
		return true
	}
	body, err := io.ReadAll(r.Body) // in memory: readBody read it
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || !isAnswer(body) {
		return true
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return true // isAnswer decoded it
	}
	c, _ := callerOf(auth.TokenInfoFromContext(r.Context()))
	var sealed string
	var id relayedID
	reason := ""
	switch {
	case json.Unmarshal(m["id"], &sealed) != nil || d.ids.Open(sealed, d.s.opts.Now(), &id) != nil:
		reason = "the request id is not one Usher sealed, or it has expired"
	case id.Session != rec.ID:
		reason = "the request id was sent to another session"
	case id.Principal != rec.Principal || id.Principal != c.Subject:
		reason = "the request id was sent to another principal"
	}
	if reason != "" {
		d.s.record(context.WithoutCancel(r.Context()), Event{Principal: c.Subject, ClientID: c.ClientID, TokenID: c.TokenID,
			Outcome: OutcomeFailed, Reasons: []string{reason}}, KindAnswerRefused)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": m["id"],
			"error": map[string]any{"code": -32600, "message": errAnswerRefused}})
		return false
	}
	m["id"] = id.ID
	if body, err = json.Marshal(m); err != nil {
		return true // unreachable: m was decoded
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return true
}

// sealRequests returns w, which seals the id of each request of the
// session rec that goes out on it (an event of a response stream).
func (d *durableSessions) sealRequests(w http.ResponseWriter, rec store.MCPSession) http.ResponseWriter {
	return &sealingWriter{ResponseWriter: w, d: d, rec: rec}
}

// sealingWriter seals the ids of the requests written on a response
// stream. The Go SDK writes each event of a stream in one Write.
type sealingWriter struct {
	http.ResponseWriter
	d   *durableSessions
	rec store.MCPSession
}

// Unwrap gives http.ResponseController the writer's Flush.
func (w *sealingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *sealingWriter) Write(b []byte) (int, error) {
	out, ok := w.seal(b)
	if !ok {
		return w.ResponseWriter.Write(b)
	}
	if _, err := w.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

var dataField = []byte("data: ")

// seal returns the event b with the id of the request it carries sealed,
// or false if it carries none.
func (w *sealingWriter) seal(b []byte) ([]byte, bool) {
	if !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		return nil, false
	}
	start := 0
	if !bytes.HasPrefix(b, dataField) {
		if start = bytes.Index(b, []byte("\ndata: ")); start < 0 {
			return nil, false
		}
		start++
	}
	start += len(dataField)
	end := bytes.IndexByte(b[start:], '\n')
	if end < 0 {
		end = len(b)
	} else {
		end += start
	}
	data := b[start:end]
	if !bytes.Contains(data, []byte(`"method"`)) {
		return nil, false // a response
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || m["method"] == nil || m["id"] == nil || string(m["id"]) == "null" {
		return nil, false // a notification
	}
	sealed, err := w.d.ids.Seal(relayedID{Session: w.rec.ID, Principal: w.rec.Principal, ID: m["id"]},
		w.d.s.opts.Now().Add(w.d.s.opts.InputLifetime))
	if err != nil {
		return nil, false // unreachable: the id was decoded
	}
	m["id"], _ = json.Marshal(sealed)
	sealedData, err := json.Marshal(m)
	if err != nil {
		return nil, false
	}
	out := make([]byte, 0, len(b)+len(sealed))
	out = append(append(append(out, b[:start]...), sealedData...), b[end:]...)
	return out, true
}
