package broker

import "github.com/usherhq/usher/internal/jwks"

// RemoteKeySet is a KeySource that fetches the broker's JWKS over HTTP, for
// MCP servers in another process than the broker. It is the one key set
// cache of the module (see package internal/jwks): a set is used until its
// RefreshInterval or its Cache-Control max-age ends, an unknown kid fetches
// it again at most once per MinRefreshInterval, one fetch runs at a time
// without holding a lock, and each caller stops waiting for it when its own
// context ends.
type RemoteKeySet = jwks.Remote

// RemoteKeySetOptions configures a RemoteKeySet; see jwks.RemoteOptions.
type RemoteKeySetOptions = jwks.RemoteOptions

// NewRemoteKeySet returns a key set fetched from jwksURL, on first use.
func NewRemoteKeySet(jwksURL string, opts *RemoteKeySetOptions) (*RemoteKeySet, error) {
	return jwks.NewRemote(jwksURL, opts)
}
