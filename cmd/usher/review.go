package main

import (
	"context"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/review"
)

// review mounts the security reviewers' API of the audit log (with its
// signed checkpoints), the policy and the tools, for signed-in people
// only: a broker token is refused, and the API's verifier refuses tokens
// without its required scope (an application's own).
func (s *serving) review(context.Context) error {
	api, err := review.New(s.in.store, &review.Options{
		Groups:      s.cfg.Review.Groups,
		Checkpoints: audit.CheckpointsHandler(s.in.store, s.log.With("component", "audit")),
		AuditKeys:   s.auditKeys,
		Policy:      s.mcpStack.policy,
		Lock:        s.mcpStack.lock,
		Catalog:     s.mcpStack.catalog,
		Logger:      s.log.With("component", "review"),
	})
	if err != nil {
		return err
	}
	h := broker.RefuseTokens(s.publicURL, s.authenticated(api.Handler()))
	for _, p := range review.Paths {
		s.mux.Handle(p, h)
		s.mux.Handle(p+"/", h)
	}
	return nil
}
