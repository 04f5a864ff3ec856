package assistant

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store"
)

// Purposes of a model request, the purpose label of the model metrics: a
// step of a person's turn, or a summary a compaction asked for.
const (
	purposeTurn       = "turn"
	purposeCompaction = "compaction"
)

// Outcomes of a model request, the outcome label of
// usher_model_requests_total.
const (
	outcomeOK          = "ok"
	outcomeRateLimited = "rate_limited" // 429
	outcomeServerError = "server_error" // 5xx
	outcomeRefused     = "refused"      // another 4xx: the request, the key, the model
	outcomeUnreachable = "unreachable"  // no answer: the network, a timeout
	outcomeFailed      = "failed"       // an answer that could not be read, or another failure
	outcomeCancelled   = "cancelled"    // the turn was stopped or the process drained
)

// modelMetrics are what an operator reads of the model server: requests
// by outcome, their time and the time to their first token, and the
// tokens they used, by model and purpose. The models are those the
// runtime offers (Options.Models, or ModelName alone), so the labels are
// bounded by the configuration; their series exist from the start, at 0.
type modelMetrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	firstToken *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
}

// defaultModelLabel is the model label of requests that name no model
// (the provider's own), when the runtime has no ModelName.
const defaultModelLabel = "default"

// newModelMetrics makes the metrics, with a series of each model, purpose
// and outcome (or token type) at 0.
func newModelMetrics(models []string) *modelMetrics {
	m := &modelMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_model_requests_total",
			Help: "Requests of this process to the model server, by model, purpose (turn, compaction) and outcome (ok, rate_limited, server_error, refused, unreachable, failed, cancelled); each retry is a request.",
		}, []string{"model", "purpose", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "usher_model_request_duration_seconds",
			Help:    "Time of this process's model requests, from sending one to its last token or its failure, by model and purpose.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300},
		}, []string{"model", "purpose"}),
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "usher_model_time_to_first_token_seconds",
			Help:    "Time from sending a turn's model request to the first text it streamed, by model: how long a person waits before the reply begins.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60},
		}, []string{"model"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_model_tokens_total",
			Help: "Tokens of this process's successful model requests as the model server counted them, by model, purpose and type (input: the request; output: the answer).",
		}, []string{"model", "purpose", "type"}),
	}
	for _, name := range models {
		name = cmp.Or(name, defaultModelLabel)
		m.firstToken.WithLabelValues(name)
		for _, purpose := range []string{purposeTurn, purposeCompaction} {
			m.duration.WithLabelValues(name, purpose)
			m.tokens.WithLabelValues(name, purpose, "input")
			m.tokens.WithLabelValues(name, purpose, "output")
			for _, outcome := range []string{outcomeOK, outcomeRateLimited, outcomeServerError, outcomeRefused, outcomeUnreachable, outcomeFailed, outcomeCancelled} {
				m.requests.WithLabelValues(name, purpose, outcome)
			}
		}
	}
	return m
}

// collectors are the metrics, for registration.
func (m *modelMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.firstToken, m.tokens}
}

// metered is a model.Provider that counts the requests of one purpose
// in m, and hands what a successful one used to use with the person its
// context names (withUsageOwner); a request that names no model is
// counted under fallback, the model the provider answers with.
type metered struct {
	model.Provider
	m        *modelMetrics
	purpose  string
	fallback string
	now      func() time.Time
	use      func(context.Context, store.ModelUsage)
}

// provider wraps p to count its requests of purpose, and to hand their
// usage to use.
func (m *modelMetrics) provider(p model.Provider, purpose, fallback string, now func() time.Time, use func(context.Context, store.ModelUsage)) model.Provider {
	return &metered{Provider: p, m: m, purpose: purpose, fallback: cmp.Or(fallback, defaultModelLabel), now: now, use: use}
}

// usageOwnerKey is the context key of the person whose model requests a
// context's requests are.
type usageOwnerKey struct{}

// withUsageOwner makes the model requests made with ctx principal's.
func withUsageOwner(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, usageOwnerKey{}, principal)
}

// Complete completes req with the provider and counts it.
func (p *metered) Complete(ctx context.Context, req model.Request, onDelta func(string)) (model.Response, error) {
	name := cmp.Or(req.Model, p.fallback)
	start := p.now()
	if onDelta != nil {
		var first sync.Once
		inner := onDelta
		onDelta = func(delta string) {
			first.Do(func() { p.m.firstToken.WithLabelValues(name).Observe(p.now().Sub(start).Seconds()) })
			inner(delta)
		}
	}
	resp, err := p.Provider.Complete(ctx, req, onDelta)
	p.m.duration.WithLabelValues(name, p.purpose).Observe(p.now().Sub(start).Seconds())
	p.m.requests.WithLabelValues(name, p.purpose, outcomeOf(ctx, err)).Inc()
	if err == nil {
		in, out := max(resp.Usage.PromptTokens, 0), max(resp.Usage.CompletionTokens, 0)
		p.m.tokens.WithLabelValues(name, p.purpose, "input").Add(float64(in))
		p.m.tokens.WithLabelValues(name, p.purpose, "output").Add(float64(out))
		if owner, _ := ctx.Value(usageOwnerKey{}).(string); owner != "" && p.use != nil {
			p.use(ctx, store.ModelUsage{Principal: owner, Day: store.UsageDay(start), Model: name, Purpose: p.purpose,
				Requests: 1, InputTokens: int64(in), OutputTokens: int64(out)})
		}
	}
	return resp, err
}

// outcomeOf is the outcome label of a request that ended with err, whose
// context is ctx.
func outcomeOf(ctx context.Context, err error) string {
	var me *model.Error
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled):
		return outcomeCancelled
	case !errors.As(err, &me):
		return outcomeFailed
	case me.StatusCode == http.StatusTooManyRequests:
		return outcomeRateLimited
	case me.StatusCode >= 500:
		return outcomeServerError
	case me.StatusCode >= 400:
		return outcomeRefused
	case me.StatusCode == 0 && me.Retryable:
		return outcomeUnreachable
	}
	return outcomeFailed
}
