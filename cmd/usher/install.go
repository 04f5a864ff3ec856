package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
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
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

// parseFlags parses args with fs. A flag fs does not know, or a value it
// cannot take, is a usage error, which fs has printed with its usage;
// -h and -help are flag.ErrHelp, after the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %w", errUsage, err)
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

// installation is an opened store at the newest schema and the key that seals the
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

// open opens an installation that serve or migrate made, and changes
// nothing of it: a command run with a configuration or data directory that
// names no installation fails, rather than making an empty one and acting
// on that. The SQLite file must exist, the schema must be at the newest
// migration (Ready: migrating is serve's and migrate's), and the seal key
// is read, never made: without broker.key_encryption_key and the data
// directory's broker.key, sealKey is nil, and what needs it says so
// (keyring, auditKeys).
func open(ctx context.Context, cfg config.Config, log *slog.Logger) (*installation, error) {
	return openWith(ctx, cfg, log, nil, false)
}

// setUp opens the installation as serve and migrate do: it makes the data
// directory when something is kept in it (the SQLite file, a generated
// seal key), applies pending migrations, and loads or makes the seal key.
// A database that cannot be reached leaves nothing behind. Its store
// makes spans of its statements with tp (none when nil).
func setUp(ctx context.Context, cfg config.Config, log *slog.Logger, tp trace.TracerProvider) (*installation, error) {
	return openWith(ctx, cfg, log, tp, true)
}

// openWith is open, or setUp when create is true.
func openWith(ctx context.Context, cfg config.Config, log *slog.Logger, tp trace.TracerProvider, create bool) (*installation, error) {
	dsn := cfg.Database.URL
	if dsn == "" {
		dsn = sqlitePath(cfg)
		if create {
			if err := makeDataDir(cfg); err != nil {
				return nil, err
			}
		} else if _, err := os.Stat(dsn); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				abs, _ := filepath.Abs(dsn)
				return nil, fmt.Errorf("no database at %s: the data directory (--data-dir, server.data_dir) or --database-url must name the installation's; usher serve or usher migrate makes a new one", abs)
			}
			return nil, fmt.Errorf("open database: %w", err)
		}
	}
	st, err := store.Open(ctx, dsn, &store.Options{Logger: log, MaxConns: cfg.Database.MaxConns, TracerProvider: tp})
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if create {
		err = st.Migrate(ctx)
	} else {
		err = st.Ready(ctx)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	seal, err := sealKey(cfg, create)
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

// sealKey is the key that seals the installation's signing keys:
// broker.key_encryption_key, else the data directory's broker.key, which
// create makes when there is none. Without create, a missing file is no
// key (nil) and no error.
func sealKey(cfg config.Config, create bool) ([]byte, error) {
	if k := cfg.Broker.KeyEncryptionKey; k != "" {
		return broker.ParseSealKey(k)
	}
	path := sealKeyPath(cfg)
	if !create {
		k, err := broker.LoadSealKey(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return k, err
	}
	if err := makeDataDir(cfg); err != nil {
		return nil, err
	}
	return broker.LoadOrCreateSealKey(path)
}

// sealKeyPath is where the seal key is kept when broker.key_encryption_key
// is not set.
func sealKeyPath(cfg config.Config) string { return filepath.Join(cfg.Server.DataDir, "broker.key") }

// errNoSealKey is the error of a command that needs the seal key where
// open found none.
func (in *installation) errNoSealKey() error {
	abs, _ := filepath.Abs(sealKeyPath(in.cfg))
	return fmt.Errorf("no key encryption key: broker.key_encryption_key is not set and there is no %s; give this command the servers' key (USHER_BROKER_KEY_ENCRYPTION_KEY) or run it with their data directory (--data-dir)", abs)
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
	if in.sealKey == nil {
		return nil, in.errNoSealKey()
	}
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
			err, sealKeyPath(in.cfg))
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
