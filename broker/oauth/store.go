package oauth

import (
	"context"
	"time"

	"github.com/usherhq/usher/store"
)

// Store is the part of store.Store the authorization server uses: its
// clients, consents, authorization codes and refresh tokens, their sweep,
// and the person's settings (the consent page's theme).
type Store interface {
	// Clients.
	CreateOAuthClient(ctx context.Context, c store.OAuthClient) (store.OAuthClient, error)
	PutMetadataClient(ctx context.Context, c store.OAuthClient) (store.OAuthClient, error)
	PutConfiguredClient(ctx context.Context, c store.OAuthClient, audit func(prev *store.OAuthClient) func(store.AuditHead) (store.AuditRecord, error)) (store.OAuthClient, store.ClientChange, error)
	GetOAuthClient(ctx context.Context, id string) (store.OAuthClient, error)
	CountOAuthRegistrations(ctx context.Context, registeredBy string, since time.Time) (int, error)
	UseClientAssertion(ctx context.Context, clientID, jti string, expiresAt, now time.Time) error

	// Consents.
	PutConsent(ctx context.Context, c store.Consent) (store.Consent, error)
	GetConsent(ctx context.Context, principal, clientID string) (store.Consent, error)
	ListConsents(ctx context.Context, principal string) ([]store.Consent, error)
	RevokeConsent(ctx context.Context, principal, clientID string, now time.Time) error
	AnswerConsentForm(ctx context.Context, a store.ConsentAnswer) (store.ConsentAnswer, error)

	// Authorization codes and refresh tokens.
	CreateAuthorizationCode(ctx context.Context, c store.AuthorizationCode) error
	GetAuthorizationCode(ctx context.Context, codeHash string) (store.AuthorizationCode, error)
	RedeemAuthorizationCode(ctx context.Context, codeHash, family string, now time.Time, g *store.TokenGrant) (store.AuthorizationCode, error)
	GetRefreshToken(ctx context.Context, tokenHash string) (store.RefreshToken, error)
	RotateRefreshToken(ctx context.Context, oldHash string, now time.Time, g store.TokenGrant) (store.RefreshToken, error)
	RevokeRefreshFamily(ctx context.Context, tokenHash string, now time.Time) error

	// The theme the person chose (the consent page shows it).
	GetSettings(ctx context.Context, principal string) (store.Settings, error)

	// The sweep (Sweeper).
	DeleteExpiredOAuth(ctx context.Context, before time.Time) (int, error)
	EndRefreshRepeats(ctx context.Context, now time.Time) (int, error)
	DeleteExpiredClientAssertions(ctx context.Context, before time.Time) (int, error)
}
