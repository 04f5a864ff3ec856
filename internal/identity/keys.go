package identity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/usherhq/usher/internal/jwks"
)

const (
	// minRefetchInterval bounds how often tokens with unknown key ids make
	// the verifier fetch the key set again, so a stream of made-up kids
	// never becomes a stream of requests to the issuer.
	minRefetchInterval = 30 * time.Second
	// keysMaxAge is the longest a fetched key set is used before it is
	// fetched again (sooner if the response's Cache-Control says so), so
	// that a key the issuer withdrew stops being accepted. If that fetch
	// fails, the older keys stay in use.
	keysMaxAge = time.Hour
)

// remoteKeys is the issuer's key set, fetched from its jwks_uri on first
// use and kept by the module's one key set cache (internal/jwks). It
// implements oidc.KeySet.
type remoteKeys struct {
	set *jwks.Remote
}

func newRemoteKeys(url string, client *http.Client, now func() time.Time, logger *slog.Logger) (*remoteKeys, error) {
	set, err := jwks.NewRemote(url, &jwks.RemoteOptions{
		HTTPClient: client, RefreshInterval: keysMaxAge, MinRefreshInterval: minRefetchInterval,
		Now: now, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	return &remoteKeys{set: set}, nil
}

// VerifySignature verifies an RS256 token with the key named by its kid and
// returns the payload. go-oidc has already pinned the algorithm.
func (k *remoteKeys) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("token must have exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	if kid == "" {
		return nil, errors.New("token has no kid")
	}
	key, err := k.set.Key(ctx, kid)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", kid, err)
	}
	payload, err := jws.Verify(key)
	if err != nil {
		return nil, err
	}
	if u, ok := ctx.Value(usedKeyContext{}).(*usedKey); ok {
		u.kid, u.key = kid, key
	}
	return payload, nil
}
