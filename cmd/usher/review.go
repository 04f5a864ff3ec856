package main

import (
	"context"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/review"
)

// review mounts the security reviewers' audit API (and the list of the
// log's signed checkpoints), for signed-in people
// only: a broker token is refused, and the API's verifier refuses tokens
// without its required scope (an application's own).
func (s *serving) review(context.Context) error {
	api, err := review.New(s.in.store, &review.Options{
		Groups:      s.cfg.Review.Groups,
		Checkpoints: audit.CheckpointsHandler(s.in.store, s.log.With("component", "audit")),
		Logger:      s.log.With("component", "review"),
	})
	if err != nil {
		return err
	}
	h := broker.RefuseTokens(s.publicURL, s.authenticated(api.Handler()))
	s.mux.Handle("/api/audit", h)
	s.mux.Handle("/api/audit/", h)
	return nil
}
