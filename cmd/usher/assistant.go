package main

import (
	"cmp"
	"context"
	"net/http"
	"time"

	"golang.org/x/oauth2"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/config"
)

// buildAssistant wires the assistant runtime: its model provider, and the
// broker tokens its turns call Usher's own MCP endpoint with, over
// mcpTransport.
func (in *installation) buildAssistant(publicURL string, mint *broker.Broker, reg prometheus.Registerer, mcpTransport http.RoundTripper) (*assistant.Runtime, error) {
	cfg := in.cfg
	provider, modelName, err := modelProvider(cfg.Model)
	if err != nil {
		return nil, err
	}
	mcpURL, a := publicURL+"/mcp", cfg.Assistant
	auditLog, err := audit.New(in.store, nil)
	if err != nil {
		return nil, err
	}
	return assistant.New(&assistant.Options{
		Store: in.store, Model: provider,
		ReplicaID: in.replicaID, EarlierIncarnation: in.earlierIncarnation,
		AttachmentMaxBytes: a.AttachmentsMaxBytes, AttachmentQuotaBytes: a.AttachmentsQuotaBytes,
		TokenLimits: assistant.TokenLimits{Daily: a.DailyTokens, Groups: a.DailyTokensByGroup},
		Tokens: func(ctx context.Context, g assistant.Grant) oauth2.TokenSource {
			return mint.TokenSource(ctx, broker.Grant{Subject: g.Owner, Audience: mcpURL, RunID: g.RunID, Tenant: g.Tenant, Groups: g.Groups})
		},
		MCPURL:               mcpURL,
		MaxConcurrency:       a.MaxConcurrency,
		MaxActiveRuns:        a.MaxActiveRuns,
		HistoryMessages:      a.HistoryMessages,
		MaxToolCallsPerSlice: a.MaxToolCallsPerSlice,
		MaxSteps:             a.MaxSteps,
		MaxSlices:            a.MaxSlices,
		Lease:                a.Lease.Std(),
		SweepInterval:        a.SweepInterval.Std(),
		HoldIdle:             a.HoldIdle.Std(),
		IdleAfter:            a.IdleAfter.Std(),
		DeleteInactiveAfter:  a.DeleteInactiveAfter.Std(),
		PurgeDeletedAfter:    a.PurgeDeletedAfter.Std(),
		MaxMessageBytes:      a.MaxMessageBytes,
		SystemPrompt:         a.SystemPrompt,
		ContextTokens:        cfg.Model.ContextTokens,
		ModelName:            modelName,
		Models:               cfg.Model.Models,
		Transport:            cfg.Events.Transport,
		Heartbeat:            cfg.Events.Heartbeat.Std(),
		MaxStreamsPerUser:    cfg.Events.MaxStreamsPerUser,
		Audit:                auditLog,
		Logger:               in.log.With("component", "assistant"),
		Registerer:           reg,
		// The turn's trace context reaches /mcp with each call.
		HTTPClient: &http.Client{Timeout: 2 * time.Minute, Transport: mcpTransport},
	})
}

// modelProvider is the configured model provider, and the name of the
// model runs use unless they choose another.
func modelProvider(m config.Model) (model.Provider, string, error) {
	if m.Provider != "openai" {
		return model.NewDemo(), cmp.Or(m.Name, "demo"), nil
	}
	p, err := model.NewOpenAI(&model.OpenAIOptions{BaseURL: m.BaseURL, APIKey: m.APIKey, Model: m.Name, Timeout: m.Timeout.Std()})
	if err != nil {
		return nil, "", err
	}
	// Each request goes to the server as a payload repaired for it; the
	// history it was made from stays as it is.
	return payload.NewProvider(p, payload.OpenAICompatible|payload.ImagesIf(m.Images)), m.Name, nil
}

// mountAssistant adds the Assistant API, for signed-in people only: a
// broker token, which speaks for a user to the MCP server, is refused.
// routed names its requests' spans by its own routes.
func mountAssistant(mux *http.ServeMux, rt *assistant.Runtime, authenticated, routed func(http.Handler) http.Handler, brokerIssuer string) {
	mux.Handle("/api/assistant/", broker.RefuseTokens(brokerIssuer, authenticated(routed(rt.Handler()))))
}
