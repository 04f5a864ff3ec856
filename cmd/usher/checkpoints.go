package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"os"

	"golang.org/x/mod/sumdb/note"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/audit"
)

// auditKeys returns the installation's audit signing keys; a key made now
// is named after the log's origin, that of the installation at publicURL
// unless audit.checkpoint_origin names one.
func (in *installation) auditKeys(publicURL string) (*audit.Keys, string, error) {
	if in.sealKey == nil {
		return nil, "", in.errNoSealKey()
	}
	return in.auditKeysSealedWith(publicURL, in.sealKey)
}

// auditKeysSealedWith is auditKeys whose private keys sealKey opens and
// seals.
func (in *installation) auditKeysSealedWith(publicURL string, sealKey []byte) (*audit.Keys, string, error) {
	origin := in.cfg.Audit.CheckpointOrigin
	if origin == "" {
		var err error
		if origin, err = audit.OriginOf(publicURL); err != nil {
			return nil, "", err
		}
	}
	keys, err := audit.NewKeys(in.store, sealKey, origin, &audit.KeysOptions{PreviousSealKeys: in.previousSealKeys})
	return keys, origin, err
}

// checkpointer returns the audit keys and the checkpointer that signs
// with them every audit.checkpoint_interval.
func (in *installation) checkpointer(publicURL string) (*audit.Keys, *audit.Checkpointer, error) {
	keys, origin, err := in.auditKeys(publicURL)
	if err != nil {
		return nil, nil, err
	}
	cp, err := audit.NewCheckpointer(in.store, keys, &audit.CheckpointerOptions{
		Origin: origin, Interval: in.cfg.Audit.CheckpointInterval.Std(),
		Logger: in.log.With("component", "audit"),
	})
	return keys, cp, err
}

// cliURL is the URL an installation is served at, as a command that does
// not serve it takes it: server.public_url, else the listen address.
func (in *installation) cliURL() string {
	return cmp.Or(in.cfg.Server.PublicURL, "http://"+in.cfg.Server.Addr)
}

// trustedAuditKeys returns the verifier keys checkpoints are checked
// against, and where they came from: the file at path, a copy of
// /.well-known/usher-audit-key kept outside the installation, or else the
// keys the database holds (nil when it holds none).
func (in *installation) trustedAuditKeys(ctx context.Context, path string) (note.Verifiers, string, error) {
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, "", err
		}
		keys, err := audit.ParseVerifierKeys(string(b))
		return keys, path, err
	}
	// The verifier keys are public: reading them opens no private key, so
	// a command without the seal key reads them with a key of its own,
	// which seals and opens nothing.
	seal := in.sealKey
	if seal == nil {
		seal = make([]byte, broker.SealKeySize)
		rand.Read(seal)
	}
	keys, _, err := in.auditKeysSealedWith(in.cliURL(), seal)
	if err != nil {
		return nil, "", err
	}
	v, err := keys.Verifiers(ctx)
	return v, "the database", err
}
