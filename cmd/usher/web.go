package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/web"
)

// mountWeb adds the Sessions UI and its browser sign-in to mux, starts the
// sweep of ended browser sessions, and returns how the API authenticates
// from then on — a bearer token as before, or a signed-in browser's
// session cookie (CSRF-protected) — and the function that stops the
// sweep. selfURL reaches this very process, for the development
// provider's endpoints. It keeps the sign-in in in.sessions, for the
// authorization server.
//
// The sign-in uses the API's own verifier, so a browser session is the
// principal a bearer token of the same person would be. With an external
// issuer and no web.client_id, browser sign-in is off and the API takes
// bearer tokens only.
func (in *installation) mountWeb(ctx context.Context, mux *http.ServeMux, publicURL, selfURL string, verifier *identity.Verifier) (func(http.Handler) http.Handler, func(), error) {
	cfg := in.cfg
	opts := &web.Options{
		PublicURL:         publicURL,
		Issuer:            cfg.Identity.Issuer,
		ClientID:          cfg.Web.ClientID,
		ClientSecret:      cfg.Web.ClientSecret,
		Scopes:            cfg.Web.Scopes,
		VerifyAccessToken: verifier.Verify,
		Secret:            in.sealKey,
		PreviousSecrets:   in.previousSealKeys,
		SessionLifetime:   cfg.Web.SessionLifetime.Std(),
		Store:             in.store,
		RevocationTTL:     cfg.Web.RevocationTTL.Std(),
		Logger:            in.log.With("component", "web"),
	}
	if cfg.DevIdentity() {
		// The provider is this process, not serving yet: no discovery; the
		// browser goes to the public URL, the server calls itself.
		issuer := publicURL + devOIDCPath
		opts.Issuer = issuer
		opts.ClientID = cmp.Or(cfg.Web.ClientID, devoidc.DefaultClientID)
		if len(opts.Scopes) == 0 {
			opts.Scopes = cfg.Identity.RequiredScopes
		}
		opts.Endpoints = &web.Endpoints{
			AuthURL:  issuer + "/authorize",
			TokenURL: selfURL + devOIDCPath + "/token",
			JWKSURL:  selfURL + devOIDCPath + "/jwks",
		}
	}
	var sessions *web.Sessions // nil: browser sign-in off
	if opts.ClientID != "" {
		var err error
		if sessions, err = web.New(ctx, opts); err != nil {
			return nil, nil, fmt.Errorf("web sign-in: %w", err)
		}
	} else {
		in.log.Warn("browser sign-in is off: set web.client_id (and web.scopes) to sign in to the Sessions UI; the API takes bearer tokens")
	}
	if err := web.Mount(mux, sessions); err != nil {
		return nil, nil, err
	}
	if err := sessions.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("web sign-in: %w", err)
	}
	in.sessions = sessions
	return func(next http.Handler) http.Handler {
		return sessions.Authenticate(next, verifier.Middleware)
	}, sessions.Stop, nil
}
