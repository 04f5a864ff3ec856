package audit

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// VerifierKeyLister lists the published audit verifier keys, newest first;
// *Keys is one.
type VerifierKeyLister interface {
	VerifierKeys(ctx context.Context) ([]string, error)
}

// KeyHandler serves the audit verifier keys as text/plain, one key a line
// in the note verifier format, the key that signs now first and every
// older one after it (GET /.well-known/usher-audit-key). A reviewer keeps
// a copy, and checks checkpoints against it (usher audit verify --keys).
func KeyHandler(keys VerifierKeyLister, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list, err := keys.VerifierKeys(r.Context())
		if err != nil {
			httpx.WriteError(w, r, log, err)
			return
		}
		if len(list) == 0 {
			httpx.WriteError(w, r, log, httpx.Errorf(http.StatusNotFound, "no_audit_key", "No checkpoint has been signed yet."))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = w.Write([]byte(strings.Join(list, "\n") + "\n"))
	})
}

// CheckpointLister lists stored checkpoints in order of Seq; store.Store
// is one.
type CheckpointLister interface {
	ListAuditCheckpoints(ctx context.Context, afterSeq int64, limit int) ([]store.AuditCheckpoint, error)
}

// MaxCheckpointsPage bounds the limit of a page of checkpoints.
const MaxCheckpointsPage = 1000

// checkpointJSON is a checkpoint in the API.
type checkpointJSON struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
	At   string `json:"at"`
	Note string `json:"note"`
}

// checkpointsPage is a page of the API's list of checkpoints.
type checkpointsPage struct {
	Checkpoints []checkpointJSON `json:"checkpoints"`
	// Next is the after of the next page; absent on the last.
	Next *int64 `json:"next,omitempty"`
}

var errBadPage = httpx.Errorf(http.StatusBadRequest, "invalid_request",
	"after must be a sequence number (0 or more), limit a number from 1 to 1000.")

// CheckpointsHandler lists the stored checkpoints, oldest first, for GET
// /api/audit/checkpoints: ?after=SEQ (default 0) returns those of higher
// sequence numbers, ?limit= (1 to 1000, default 100) at most that many;
// "next", when present, is the after of the next page. Each carries its
// signed note, to be checked against the published keys. It authorizes
// nothing: whoever mounts it decides who may read it.
func CheckpointsHandler(st CheckpointLister, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		after, limit, ok := pageOf(r)
		if !ok {
			httpx.WriteError(w, r, log, errBadPage)
			return
		}
		list, err := st.ListAuditCheckpoints(r.Context(), after, limit)
		if err != nil {
			httpx.WriteError(w, r, log, err)
			return
		}
		page := checkpointsPage{Checkpoints: make([]checkpointJSON, len(list))}
		for i, cp := range list {
			page.Checkpoints[i] = checkpointJSON{Seq: cp.Seq, Hash: cp.Hash, At: cp.At.UTC().Format(timeLayout), Note: cp.Note}
		}
		if len(list) == limit {
			page.Next = &list[len(list)-1].Seq
		}
		httpx.WriteJSON(w, http.StatusOK, page)
	})
}

// pageOf reads after and limit from r's query.
func pageOf(r *http.Request) (after int64, limit int, ok bool) {
	q := r.URL.Query()
	after, limit = 0, 100
	if s := q.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, false
		}
		after = n
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxCheckpointsPage {
			return 0, 0, false
		}
		limit = n
	}
	return after, limit, true
}
