package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestWriteErrorNeverEchoesInternalText(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	rec := httptest.NewRecorder()
	WriteError(rec, httptest.NewRequest("GET", "/x", nil), log, errors.New(`pq: relation "runs" does not exist`))
	if rec.Code != 500 {
		t.Fatalf("status = %d", rec.Code)
	}
	if strings.Contains(rec.Body.String(), "relation") {
		t.Errorf("internal text leaked: %s", rec.Body)
	}
	if !strings.Contains(logs.String(), "relation") {
		t.Errorf("internal text not logged: %s", logs.String())
	}
	var body struct{ Error Error }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != "internal" {
		t.Errorf("body = %s (%v)", rec.Body, err)
	}
}

// downError is a dependency's error that says whether it is unavailable.
type downError bool

func (e downError) Error() string     { return "database: connection refused" }
func (e downError) Unavailable() bool { return bool(e) }

// TestWriteErrorUnavailable answers an error that says a dependency is out
// of reach for a while with 503, code unavailable and a Retry-After, logged
// and without its text; one that says it is not is still a 500.
func TestWriteErrorUnavailable(t *testing.T) {
	for _, down := range []bool{true, false} {
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		rec := httptest.NewRecorder()
		WriteError(rec, httptest.NewRequest("POST", "/x", nil), log, fmt.Errorf("post: %w", downError(down)))
		var body struct{ Error Error }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("body = %s (%v)", rec.Body, err)
		}
		want, code, after := http.StatusInternalServerError, "internal", ""
		if down {
			want, code, after = http.StatusServiceUnavailable, "unavailable", "1"
		}
		if rec.Code != want || body.Error.Code != code || rec.Header().Get("Retry-After") != after {
			t.Errorf("unavailable %v: %d %q, Retry-After %q; want %d %q, %q", down, rec.Code, body.Error.Code, rec.Header().Get("Retry-After"), want, code, after)
		}
		if strings.Contains(rec.Body.String(), "refused") || !strings.Contains(logs.String(), "refused") {
			t.Errorf("unavailable %v: the error's text was sent (%s) or not logged (%s)", down, rec.Body, logs.String())
		}
	}
}

func TestWriteErrorUsesWrappedAPIError(t *testing.T) {
	rec := httptest.NewRecorder()
	err := fmt.Errorf("lookup: %w", Errorf(http.StatusConflict, "operator_run_closed", "The run is closed."))
	WriteError(rec, httptest.NewRequest("GET", "/x", nil), nil, err)
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), `"code":"operator_run_closed"`) {
		t.Errorf("got %d %s", rec.Code, rec.Body)
	}
	if rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers = %v", rec.Header())
	}
}

func TestLimitBody(t *testing.T) {
	h := LimitBody(16, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				WriteError(w, r, nil, ErrBodyTooLarge)
				return
			}
			t.Errorf("unexpected error %v", err)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	for _, tc := range []struct {
		name   string
		body   io.Reader
		length int64
		want   int
	}{
		{"within", strings.NewReader("small"), 5, http.StatusNoContent},
		{"declared too large", strings.NewReader(strings.Repeat("x", 17)), 17, http.StatusRequestEntityTooLarge},
		{"chunked too large", io.MultiReader(strings.NewReader(strings.Repeat("x", 100))), -1, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", tc.body)
			r.ContentLength = tc.length
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != tc.want {
				t.Errorf("status = %d, want %d", rec.Code, tc.want)
			}
		})
	}
}

func TestMetricsLabelByPatternNotPath(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /runs/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewServer(m.Wrap(mux))
	defer srv.Close()
	for _, p := range []string{"/runs/a", "/runs/b", "/nothing/here"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("GET /runs/{id}", "GET", "418")); got != 2 {
		t.Errorf("pattern count = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("unmatched", "GET", "404")); got != 1 {
		t.Errorf("unmatched count = %v, want 1", got)
	}
}

// TestLatencyBucketsResolveSubMillisecond checks that the request latency
// histogram has the buckets LatencyBuckets names, 0.1 ms to 10 s: a
// 0.25 ms request falls in the 0.3 ms bucket and not the 0.2 ms one, which
// the default buckets (lowest 5 ms) cannot tell apart, and 1.7 and 2.6 ms
// requests in buckets of their own.
func TestLatencyBucketsResolveSubMillisecond(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	for _, d := range []float64{0.00025, 0.0017, 0.0026} {
		m.duration.WithLabelValues("GET /x", "GET").Observe(d)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var bounds []float64
	counts := map[float64]uint64{}
	for _, f := range families {
		if f.GetName() != "usher_http_request_duration_seconds" {
			continue
		}
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
			counts[b.GetUpperBound()] = b.GetCumulativeCount()
		}
	}
	want := []float64{0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075,
		0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	if !slices.Equal(bounds, want) {
		t.Fatalf("buckets = %v, want %v", bounds, want)
	}
	for le, n := range map[float64]uint64{0.0002: 0, 0.0003: 1, 0.0015: 1, 0.002: 2, 0.003: 3} {
		if counts[le] != n {
			t.Errorf("requests of 0.25, 1.7 and 2.6 ms: cumulative count le=%g is %d, want %d", le, counts[le], n)
		}
	}
	for i := 1; i < len(want); i++ {
		if want[i] > 0.0005 && want[i] <= 0.01 && want[i] > 2*want[i-1] {
			t.Errorf("bucket %g is more than twice the one below it, %g", want[i], want[i-1])
		}
	}

}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.8.9.10": true, "::1": true,
		"": false, "localhost.example.com": false, "10.0.0.1": false, "[::1]": false, "0.0.0.0": false,
	} {
		if got := IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
