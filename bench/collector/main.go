// Command collector is the receiving end of the out-of-process benchmark's
// telemetry and audit delivery (bench/mcpbench), a process of its own on
// loopback so that what it spends is not the load client's: an OTLP/HTTP
// trace receiver (POST /v1/traces, protobuf, as OTEL_EXPORTER_OTLP_ENDPOINT
// names it) and an audit webhook (POST /audit, the batches an audit sink
// sends). It decodes every export and every batch as a real receiver
// would — the spans from their protobuf, each line of a batch as JSON,
// the bearer secret and the Usher-Signature HMAC checked — and counts what
// it received; GET /counts answers the counts as JSON. It prints its base
// URL on the first line of its standard output.
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/usherhq/usher/bench/loopback"
)

// maxBody bounds one export or batch (a sink's batch is about 1 MiB at
// most).
const maxBody = 32 << 20

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	secretFile := flag.String("secret-file", "", "the audit webhook's secret (as the sink's secret_file): required for POST /audit")
	flag.Parse()
	if err := run(*addr, *secretFile); err != nil {
		fmt.Fprintln(os.Stderr, "collector:", err)
		os.Exit(1)
	}
}

func run(addr, secretFile string) error {
	c := &collector{seqs: map[int64]bool{}, spanNames: map[string]int64{}}
	if secretFile != "" {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return err
		}
		c.secret = bytes.TrimSuffix(b, []byte("\n"))
	}
	return loopback.Serve(addr, c.handler(), func(a net.Addr) string { return fmt.Sprintf("collector at http://%s", a) })
}

// Counts is what the collector received, as GET /counts answers it.
type Counts struct {
	// TraceExports is the OTLP export requests received; Spans the spans
	// in them; SpanNames the spans by "kind name" (SERVER tools/call).
	TraceExports int64            `json:"trace_exports"`
	Spans        int64            `json:"spans"`
	SpanNames    map[string]int64 `json:"span_names"`
	// AuditBatches is the webhook batches accepted; AuditRecords the
	// distinct record sequence numbers in them, AuditDuplicates the lines
	// of a sequence number received before, AuditMaxSeq the highest, and
	// Checkpoints the checkpoint lines.
	AuditBatches    int64 `json:"audit_batches"`
	AuditRecords    int64 `json:"audit_records"`
	AuditDuplicates int64 `json:"audit_duplicates"`
	AuditMaxSeq     int64 `json:"audit_max_seq"`
	Checkpoints     int64 `json:"checkpoints"`
	// Refused is the requests refused: not decodable, or a batch whose
	// secret or signature was wrong.
	Refused int64 `json:"refused"`
}

type collector struct {
	secret []byte

	mu        sync.Mutex
	counts    Counts
	seqs      map[int64]bool
	spanNames map[string]int64
}

func (c *collector) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", c.traces)
	mux.HandleFunc("POST /audit", c.audit)
	mux.HandleFunc("GET /counts", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		out := c.counts
		out.SpanNames = make(map[string]int64, len(c.spanNames))
		for k, v := range c.spanNames {
			out.SpanNames[k] = v
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out) //nolint:errcheck // the client went away
	})
	return mux
}

// refuse counts a refused request and answers it.
func (c *collector) refuse(w http.ResponseWriter, status int, why string) {
	c.mu.Lock()
	c.counts.Refused++
	c.mu.Unlock()
	fmt.Fprintf(os.Stderr, "collector: refused: %s\n", why)
	http.Error(w, why, status)
}

// body reads a request's body, gunzipped when it is sent compressed.
func body(r *http.Request) ([]byte, error) {
	var rd io.Reader = http.MaxBytesReader(nil, r.Body, maxBody)
	if r.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(rd)
		if err != nil {
			return nil, err
		}
		defer z.Close()
		rd = io.LimitReader(z, maxBody)
	}
	return io.ReadAll(rd)
}

// traces receives an OTLP/HTTP export of spans.
func (c *collector) traces(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		c.refuse(w, http.StatusUnsupportedMediaType, "an export that is not protobuf: "+ct)
		return
	}
	b, err := body(r)
	var export collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &export)
	}
	if err != nil {
		c.refuse(w, http.StatusBadRequest, "an export that does not decode: "+err.Error())
		return
	}
	c.mu.Lock()
	c.counts.TraceExports++
	for _, rs := range export.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.counts.Spans++
				kind := strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_")
				if s.GetKind() == tracepb.Span_SPAN_KIND_UNSPECIFIED {
					kind = "UNSPECIFIED"
				}
				c.spanNames[kind+" "+s.GetName()]++
			}
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Write(resp) //nolint:errcheck // the exporter went away
}

// auditLine is what the collector reads of a line of a batch.
type auditLine struct {
	Seq  *int64 `json:"seq"`
	Kind string `json:"kind"`
	Hash string `json:"hash"`
}

// audit receives a batch of the audit log's lines from a webhook sink:
// its secret and signature checked, each line decoded, records counted by
// sequence number (a receiver deduplicates by it).
func (c *collector) audit(w http.ResponseWriter, r *http.Request) {
	if c.secret == nil {
		c.refuse(w, http.StatusNotFound, "no -secret-file: no webhook")
		return
	}
	b, err := body(r)
	if err != nil {
		c.refuse(w, http.StatusBadRequest, "unreadable batch: "+err.Error())
		return
	}
	// The contract of docs/audit.md, written here again rather than
	// taken from the sender's code.
	mac := hmac.New(sha256.New, c.secret)
	mac.Write(b)
	if !hmac.Equal([]byte(r.Header.Get("Authorization")), []byte("Bearer "+string(c.secret))) ||
		!hmac.Equal([]byte(r.Header.Get("Usher-Signature")), []byte("sha256="+hex.EncodeToString(mac.Sum(nil)))) {
		c.refuse(w, http.StatusUnauthorized, "a batch with a wrong secret or signature")
		return
	}
	var lines []auditLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxBody)
	for sc.Scan() {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Seq == nil || l.Hash == "" {
			c.refuse(w, http.StatusBadRequest, fmt.Sprintf("a line that is not a record: %.200s", sc.Bytes()))
			return
		}
		lines = append(lines, l)
	}
	c.mu.Lock()
	c.counts.AuditBatches++
	for _, l := range lines {
		switch {
		case l.Kind == "audit_checkpoint":
			c.counts.Checkpoints++
		case c.seqs[*l.Seq]:
			c.counts.AuditDuplicates++
		default:
			c.seqs[*l.Seq] = true
			c.counts.AuditRecords++
			c.counts.AuditMaxSeq = max(c.counts.AuditMaxSeq, *l.Seq)
		}
	}
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
