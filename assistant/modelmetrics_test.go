package assistant

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestModelMetrics sends requests to a scripted OpenAI-compatible server
// through the counted provider and reads the metrics back: each outcome
// under its label, the tokens the server counted, the time to the first
// streamed text, and every series of the configured models there at 0
// before any request.
func TestModelMetrics(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	openai, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: ms.URL(), APIKey: "k", Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	m := newModelMetrics([]string{"scripted", "other"})
	reg := prometheus.NewRegistry()
	for _, c := range m.collectors() {
		reg.MustRegister(c)
	}
	if n := testutil.CollectAndCount(m.requests); n != 2*2*7 {
		t.Errorf("%d request series before any request, want one per model, purpose and outcome (28)", n)
	}
	var used []store.ModelUsage
	use := func(_ context.Context, u store.ModelUsage) { used = append(used, u) }
	turn := m.provider(openai, purposeTurn, "scripted", time.Now, use)
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "three words here"}}}
	ctx := t.Context()

	ms.Reply("a reply of five words")
	var deltas []string
	if _, err := turn.Complete(withUsageOwner(ctx, "iss|t|alice"), req, func(d string) { deltas = append(deltas, d) }); err != nil {
		t.Fatal(err)
	}
	if len(used) != 1 || used[0].Principal != "iss|t|alice" || used[0].Model != "scripted" || used[0].Purpose != purposeTurn ||
		used[0].Requests != 1 || used[0].InputTokens <= 0 || used[0].OutputTokens <= 0 || used[0].Day != store.UsageDay(time.Now()) {
		t.Errorf("the usage handed on for alice's request: %+v", used)
	}
	for _, status := range []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusBadRequest} {
		ms.ReplyError(status)
		if _, err := turn.Complete(ctx, req, nil); err == nil {
			t.Fatalf("a %d answer: no error", status)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := turn.Complete(cancelled, req, nil); err == nil {
		t.Fatal("a cancelled request: no error")
	}
	ms.Reply("a summary")
	if _, err := m.provider(openai, purposeCompaction, "scripted", time.Now, use).Complete(ctx, model.Request{Model: "other", Messages: req.Messages}, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	gone, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: closed, APIKey: "k", Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.provider(gone, purposeTurn, "scripted", time.Now, use).Complete(ctx, req, nil); err == nil {
		t.Fatal("a request to a closed port: no error")
	}

	for _, c := range []struct {
		model, purpose, outcome string
		want                    float64
	}{
		{"scripted", purposeTurn, outcomeOK, 1},
		{"scripted", purposeTurn, outcomeRateLimited, 1},
		{"scripted", purposeTurn, outcomeServerError, 1},
		{"scripted", purposeTurn, outcomeRefused, 1},
		{"scripted", purposeTurn, outcomeCancelled, 1},
		{"scripted", purposeTurn, outcomeUnreachable, 1},
		{"scripted", purposeTurn, outcomeFailed, 0},
		{"other", purposeCompaction, outcomeOK, 1},
		{"scripted", purposeCompaction, outcomeOK, 0},
	} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(c.model, c.purpose, c.outcome)); got != c.want {
			t.Errorf("usher_model_requests_total{%s,%s,%s} = %v, want %v", c.model, c.purpose, c.outcome, got, c.want)
		}
	}
	in := testutil.ToFloat64(m.tokens.WithLabelValues("scripted", purposeTurn, "input"))
	out := testutil.ToFloat64(m.tokens.WithLabelValues("scripted", purposeTurn, "output"))
	if in <= 0 || out <= 0 {
		t.Errorf("tokens of the successful turn request: input %v, output %v; want the server's counts", in, out)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("other", purposeCompaction, "output")); got <= 0 {
		t.Errorf("output tokens of the compaction's request, under the model it named: %v", got)
	}
	if len(deltas) == 0 {
		t.Fatal("the streamed request delivered no text")
	}
	body, err := testutil.CollectAndFormat(m.firstToken, expfmt.TypeTextPlain, "usher_model_time_to_first_token_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `usher_model_time_to_first_token_seconds_count{model="scripted"} 1`) {
		t.Errorf("the time to the first token was not observed once for the streamed request:\n%s", body)
	}
	if len(used) != 1 {
		t.Errorf("usage handed on %d times, want once: only the successful request whose context names a person (%+v)", len(used), used)
	}
	if n := testutil.CollectAndCount(m.duration); n != 4 {
		t.Errorf("%d duration series, want one per model and purpose (4)", n)
	}
}

// usageFailingStore is a real store whose AddModelUsage fails.
type usageFailingStore struct {
	store.Store
	tried atomic.Int32
}

func (u *usageFailingStore) AddModelUsage(context.Context, store.ModelUsage) error {
	u.tried.Add(1)
	return errInjected
}

// TestUsageFailureFailsNoTurn: a turn whose usage cannot be recorded (the
// database refuses the write after the model answered) still completes,
// once, with its reply; the failure is only logged.
func TestUsageFailureFailsNoTurn(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	f := &usageFailingStore{Store: st}
	openRun(t, st, "run_usage", "hello")
	newHarness(t, f, model.NewDemo(), &Options{RetryBackoff: 50 * time.Millisecond})
	r := waitHandled(t, st, "run_usage", 1, 20*time.Second)
	if ends := turnEnds(t, st, "run_usage"); len(ends) != 1 || ends[0].Status != TurnCompleted || r.Failures != 0 {
		t.Fatalf("turn ends = %+v, failures %d; want one, completed, none failed", ends, r.Failures)
	}
	if f.tried.Load() == 0 {
		t.Fatal("the turn's usage was never handed to the store")
	}
}
