package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/config"
	"github.com/usherhq/usher/internal/devoidc"
	"github.com/usherhq/usher/internal/telemetry"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/web"
)

// environment is what a command may touch of the process.
type environment struct {
	getenv         func(string) string
	stdout, stderr io.Writer
}

// installFlags are the flags shared by every subcommand that acts on an
// installation, so that each acts on the same one as serve.
type installFlags struct {
	configPath string
	overrides  config.Overrides
}

func (f *installFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.configPath, "config", "", "YAML configuration `file`")
	fs.StringVar(&f.overrides.Addr, "addr", "", "listen address, host:port (server.addr)")
	fs.StringVar(&f.overrides.DataDir, "data-dir", "", "data `directory` (server.data_dir)")
	fs.StringVar(&f.overrides.DatabaseURL, "database-url", "", "postgres:// `URL`; empty means the embedded SQLite file")
}

func (e *environment) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("usher "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parse parses args and rejects positional leftovers.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

func (e *environment) loadConfig(f *installFlags) (config.Config, *slog.Logger, error) {
	cfg, err := config.Load(f.configPath, e.getenv, f.overrides)
	if err != nil {
		return cfg, nil, err
	}
	return cfg, newLogger(cfg.Log, e.stderr), nil
}

// openInstallation loads the configuration f names and opens the
// installation it describes: what a command that reads or writes the
// database begins with. The caller closes it.
func (e *environment) openInstallation(ctx context.Context, f *installFlags) (*installation, error) {
	cfg, log, err := e.loadConfig(f)
	if err != nil {
		return nil, err
	}
	return open(ctx, cfg, log)
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(telemetry.LogHandler(h))
}

// installation is an opened, migrated store and the key that seals the
// private signing keys in it.
type installation struct {
	cfg     config.Config
	log     *slog.Logger
	store   store.Store
	sealKey []byte
	// previousSealKeys are the keys sealKey replaced
	// (broker.previous_key_encryption_keys), which still open the stored
	// signing keys until `usher keys reseal`.
	previousSealKeys [][]byte
	// approvalDecided is told of every approval decision (serve sets it
	// to requeue the run that waits).
	approvalDecided func(ctx context.Context, a store.Approval)
	// sessions is the browser sign-in mountWeb started (nil when browser
	// sign-in is off): the authorization server asks it who is signed in
	// and where to sign in (SignedIn, LoginURL).
	sessions *web.Sessions
	// replicaID names this process in the runs' leases and in its
	// heartbeat (serve sets it; empty: the assistant names itself).
	replicaID string
	// earlierIncarnation tells the leases of an earlier start of this
	// replica (serve sets it with replicaID).
	earlierIncarnation func(ctx context.Context, owner string) (bool, error)
}

// open opens the installation's store, applies pending migrations and loads
// the seal key. The data directory is made only when something is kept in
// it (the SQLite file, a generated seal key): a database that cannot be
// reached leaves nothing behind.
func open(ctx context.Context, cfg config.Config, log *slog.Logger) (*installation, error) {
	return openTraced(ctx, cfg, log, nil)
}

// openTraced is open whose store makes spans of its statements with tp
// (none when nil).
func openTraced(ctx context.Context, cfg config.Config, log *slog.Logger, tp trace.TracerProvider) (*installation, error) {
	dsn := cfg.Database.URL
	if dsn == "" {
		if err := makeDataDir(cfg); err != nil {
			return nil, err
		}
		dsn = sqlitePath(cfg)
	}
	st, err := store.Open(ctx, dsn, &store.Options{Logger: log, MaxConns: cfg.Database.MaxConns, TracerProvider: tp})
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if err := st.Migrate(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("migrate database: %w", err)
	}
	var seal []byte
	if k := cfg.Broker.KeyEncryptionKey; k != "" {
		seal, err = broker.ParseSealKey(k)
	} else if err = makeDataDir(cfg); err == nil {
		seal, err = broker.LoadOrCreateSealKey(filepath.Join(cfg.Server.DataDir, "broker.key"))
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("key encryption key: %w", err)
	}
	var previous [][]byte
	for i, k := range cfg.Broker.PreviousKeyEncryptionKeys {
		key, err := broker.ParseSealKey(k)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("previous key encryption key %d: %w", i+1, err)
		}
		previous = append(previous, key)
	}
	return &installation{cfg: cfg, log: log, store: st, sealKey: seal, previousSealKeys: previous}, nil
}

// makeDataDir makes server.data_dir, readable by this user only.
func makeDataDir(cfg config.Config) error {
	if err := os.MkdirAll(cfg.Server.DataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	return nil
}

// Keyring purposes: the broker's own keys, and the keys of the built-in
// development OIDC provider.
const (
	purposeBroker  = "broker"
	purposeDevOIDC = "devoidc"
)

// keyring returns the purpose's signing keys. maxTokenLifetime is the
// longest-lived token they sign: an old key stays published that long after
// it stops signing.
func (in *installation) keyring(purpose string, maxTokenLifetime time.Duration) (*broker.Keyring, error) {
	return broker.NewKeyring(in.store, purpose, in.sealKey, &broker.KeyringOptions{
		RotationPeriod:   in.cfg.Broker.RotationPeriod.Std(),
		MaxTokenLifetime: maxTokenLifetime,
		Logger:           in.log.With("keyring", purpose),
		PreviousSealKeys: in.previousSealKeys,
	})
}

// sealHint adds to err, when the stored signing keys could not be opened
// with this process's seal key, the setting that must be mended.
func (in *installation) sealHint(err error) error {
	if !errors.Is(err, broker.ErrUnseal) {
		return err
	}
	if in.cfg.Broker.KeyEncryptionKey == "" {
		return fmt.Errorf("%w; this process used the seal key in %s: every replica of an installation needs the same key encryption key, set in USHER_BROKER_KEY_ENCRYPTION_KEY (broker.key_encryption_key)",
			err, filepath.Join(in.cfg.Server.DataDir, "broker.key"))
	}
	if len(in.previousSealKeys) > 0 {
		return fmt.Errorf("%w; neither USHER_BROKER_KEY_ENCRYPTION_KEY (broker.key_encryption_key) nor USHER_BROKER_PREVIOUS_KEY_ENCRYPTION_KEYS (broker.previous_key_encryption_keys) holds the key the installation's signing keys were sealed with", err)
	}
	return fmt.Errorf("%w; USHER_BROKER_KEY_ENCRYPTION_KEY (broker.key_encryption_key) is not the key the installation's signing keys were sealed with", err)
}

// devOIDCPath is where the built-in development OIDC provider is mounted;
// its issuer is the public URL plus this path.
const devOIDCPath = "/dev/oidc"

// devProvider returns the built-in development OIDC provider of an
// installation whose public URL is publicURL. Its one redirect URI is the
// Sessions UI's callback.
func (in *installation) devProvider(publicURL string, keys *broker.Keyring) (*devoidc.Provider, error) {
	return devoidc.New(&devoidc.Options{
		Issuer:       publicURL + devOIDCPath,
		ClientID:     in.cfg.Web.ClientID, // empty: devoidc.DefaultClientID, as the web sign-in assumes
		Keys:         keys,
		Audience:     config.DevAudience,
		Scopes:       []string{config.DevScope},
		RedirectURIs: []string{publicURL + "/auth/callback"},
		Logger:       in.log.With("component", "devoidc"),
	})
}

func (in *installation) Close() error { return in.store.Close() }
