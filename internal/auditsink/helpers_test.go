package auditsink

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// secret is the webhook's secret in the tests.
var secret = []byte("0123456789abcdef0123456789abcdef-test")

// appendRecords appends n decision records to the log of st.
func appendRecords(t *testing.T, st store.Store, n int) {
	t.Helper()
	log, err := audit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := log.Append(t.Context(), audit.Entry{Kind: audit.KindDecision, Principal: "alice", Tool: fmt.Sprintf("tool-%d", i), Decision: "allow"}); err != nil {
			t.Fatal(err)
		}
	}
}

// exported is the log of st as `usher audit export` writes it.
func exported(t *testing.T, st store.Store) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := audit.Export(t.Context(), st, &b, 0); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// receiver is a SIEM's webhook endpoint: it checks each batch's
// authorization and signature itself, and keeps what it received.
type receiver struct {
	t *testing.T
	// answer, when not nil, decides the answer to a batch instead of 200
	// (before the batch is kept: a batch answered otherwise is not).
	answer func(w http.ResponseWriter) bool

	mu       sync.Mutex
	batches  [][]byte
	seqs     []int64
	inFlight int
	overlap  bool // two batches were in flight at once
	requests int
	got      chan struct{} // a token per batch kept
}

func newReceiver(t *testing.T) *receiver {
	return &receiver{t: t, got: make(chan struct{}, 10000)}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.requests++
	rc.inFlight++
	if rc.inFlight > 1 {
		rc.overlap = true
	}
	answer := rc.answer
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		rc.inFlight--
		rc.mu.Unlock()
	}()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+string(secret) {
		rc.t.Errorf("batch with method %s and authorization %q", r.Method, r.Header.Get("Authorization"))
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); r.Header.Get("Usher-Signature") != want {
		rc.t.Errorf("batch signed %q, want %q", r.Header.Get("Usher-Signature"), want)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if answer != nil && answer(w) {
		return
	}
	seqs, err := seqsOf(body)
	if err != nil {
		rc.t.Error(err)
	}
	rc.mu.Lock()
	rc.batches = append(rc.batches, body)
	rc.seqs = append(rc.seqs, seqs...)
	rc.mu.Unlock()
	rc.got <- struct{}{}
}

// received returns the seqs received, in order of arrival, and the
// batches' bodies joined.
func (rc *receiver) received() ([]int64, []byte) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.seqs), bytes.Join(rc.batches, nil)
}

// seqsOf reads the seq of each line of body.
func seqsOf(body []byte) ([]int64, error) {
	var out []int64
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Seq *int64 `json:"seq"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Seq == nil {
			return nil, errors.Join(errors.New("a line without a seq"), err)
		}
		out = append(out, *line.Seq)
	}
	return out, sc.Err()
}

// oneTo returns the seqs from 1 to n.
func oneTo(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// missing returns the seqs from 1 to n that seqs lacks.
func missing(seqs []int64, n int) []int64 {
	have := map[int64]bool{}
	for _, s := range seqs {
		have[s] = true
	}
	var out []int64
	for i := int64(1); i <= int64(n); i++ {
		if !have[i] {
			out = append(out, i)
		}
	}
	return out
}

// cursor returns the sink's cursor in st.
func cursor(t *testing.T, st store.Store, name string) store.AuditSink {
	t.Helper()
	s, err := st.AuditSink(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
