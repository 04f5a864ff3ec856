package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/usherhq/usher/internal/periodic"
	"github.com/usherhq/usher/store"
)

// Checkpoint is what a checkpoint states: that the log named Origin held,
// at At, a record Seq whose hash is Hash. Its text, the body of the signed
// note, is four lines:
//
//	<origin>
//	<seq, decimal>
//	<hash, 64 lowercase hex digits>
//	<time, UTC, 2006-01-02T15:04:05.000000Z>
type Checkpoint struct {
	Origin string
	Seq    int64
	Hash   string
	At     time.Time
}

// text is c as the body of its note.
func (c Checkpoint) text() string {
	return fmt.Sprintf("%s\n%d\n%s\n%s\n", c.Origin, c.Seq, c.Hash, c.At.UTC().Format(timeLayout))
}

// OriginOf returns the origin of the log of the installation served at
// publicURL, as its checkpoints and keys name it: the URL's host and path,
// without the scheme or a trailing slash ("https://usher.example.com" →
// "usher.example.com").
func OriginOf(publicURL string) (string, error) {
	u, err := url.Parse(publicURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("audit: %q is not an absolute URL", publicURL)
	}
	origin := u.Host + strings.TrimSuffix(u.EscapedPath(), "/")
	if err := checkOrigin(origin); err != nil {
		return "", fmt.Errorf("audit: origin: %w", err)
	}
	return origin, nil
}

// hashPattern is what a record's hash looks like.
var hashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// parseCheckpoint reads the body of a checkpoint's note.
func parseCheckpoint(text string) (Checkpoint, error) {
	lines := strings.SplitAfter(text, "\n")
	if len(lines) != 5 || lines[4] != "" {
		return Checkpoint{}, errors.New("a checkpoint is four lines")
	}
	for i := range lines[:4] {
		lines[i] = strings.TrimSuffix(lines[i], "\n")
	}
	c := Checkpoint{Origin: lines[0], Hash: lines[2]}
	seq, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || seq < 1 || strconv.FormatInt(seq, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("sequence number %q is not a positive decimal", lines[1])
	}
	c.Seq = seq
	if !hashPattern.MatchString(c.Hash) {
		return Checkpoint{}, fmt.Errorf("hash %q is not 64 lowercase hex digits", c.Hash)
	}
	if c.At, err = time.Parse(timeLayout, lines[3]); err != nil {
		return Checkpoint{}, fmt.Errorf("time %q: %w", lines[3], err)
	}
	if err := checkOrigin(c.Origin); err != nil {
		return Checkpoint{}, fmt.Errorf("origin: %w", err)
	}
	return c, nil
}

// OpenCheckpoint checks the signed note of a checkpoint against keys, the
// trusted verifier keys, and returns what it states. It fails when no
// known key signed it, when a signature does not verify, or when the text
// is not a checkpoint.
func OpenCheckpoint(signed string, keys note.Verifiers) (Checkpoint, error) {
	n, err := note.Open([]byte(signed), keys)
	if err != nil {
		return Checkpoint{}, err
	}
	return parseCheckpoint(n.Text)
}

// CheckpointStore is the part of the database a Checkpointer uses;
// store.Store is one.
type CheckpointStore interface {
	AuditHead(ctx context.Context) (store.AuditHead, error)
	LatestAuditCheckpoint(ctx context.Context) (store.AuditCheckpoint, error)
	InsertAuditCheckpoint(ctx context.Context, c store.AuditCheckpoint) error
}

// Signers gives the signer of new checkpoints; *Keys is one.
type Signers interface {
	Signer(ctx context.Context) (note.Signer, error)
}

// CheckpointerOptions configures NewCheckpointer. Origin is required.
type CheckpointerOptions struct {
	// Origin names the log in its checkpoints: the installation's public
	// host, or a name configured for it. Required.
	Origin string
	// Interval is the least time between two checkpoints, and how often
	// Start's loop looks for new records. Default 1m.
	Interval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the loop's errors. Default slog.Default().
	Logger *slog.Logger
}

// Checkpointer signs checkpoints of the audit log's head and stores them:
// at most one every Interval, and only when records were appended since
// the last. Any number of replicas may run one on a shared database: they
// sign with the same key (Keys), the interval is measured from the last
// stored checkpoint, whoever stored it, and the store keeps one
// checkpoint of a head.
type Checkpointer struct {
	st     CheckpointStore
	keys   Signers
	origin string
	every  time.Duration
	now    func() time.Time
	log    *slog.Logger
	loop   *periodic.Loop
}

// NewCheckpointer returns a Checkpointer of st's log, signing with keys.
func NewCheckpointer(st CheckpointStore, keys Signers, opts *CheckpointerOptions) (*Checkpointer, error) {
	var o CheckpointerOptions
	if opts != nil {
		o = *opts
	}
	var errs []error
	if st == nil || keys == nil {
		errs = append(errs, errors.New("a store and keys are required"))
	}
	if err := checkOrigin(o.Origin); err != nil {
		errs = append(errs, fmt.Errorf("origin: %w", err))
	}
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval %s is negative", o.Interval))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("audit: checkpointer: %w", err)
	}
	c := &Checkpointer{st: st, keys: keys, origin: o.Origin, every: o.Interval, now: o.Now, log: o.Logger}
	if c.every == 0 {
		c.every = time.Minute
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.loop = periodic.New(c.every, func(ctx context.Context) {
		if _, _, err := c.Checkpoint(ctx); err != nil && ctx.Err() == nil {
			c.log.ErrorContext(ctx, "audit: checkpoint failed", "err", err)
		}
	})
	return c, nil
}

// Start makes sure the signing key exists, making the first one, so that
// it is published before the first checkpoint and a seal key that cannot
// open it fails here; then it checkpoints at once and every Interval until
// Stop.
func (c *Checkpointer) Start(ctx context.Context) error {
	if _, err := c.keys.Signer(ctx); err != nil {
		return err
	}
	return c.loop.Start(ctx)
}

// Stop ends the loop and waits for a checkpoint under way. It is
// idempotent and safe to call without Start.
func (c *Checkpointer) Stop() { c.loop.Stop() }

// Checkpoint signs and stores a checkpoint of the log's head when records
// were appended since the last checkpoint and Interval has passed since
// it. It returns the checkpoint and true when it stored one; false when
// none was due, or another replica stored one of the same head first.
func (c *Checkpointer) Checkpoint(ctx context.Context) (store.AuditCheckpoint, bool, error) {
	head, err := c.st.AuditHead(ctx)
	if err != nil {
		return store.AuditCheckpoint{}, false, fmt.Errorf("audit: checkpoint: %w", err)
	}
	last, err := c.st.LatestAuditCheckpoint(ctx)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.AuditCheckpoint{}, false, fmt.Errorf("audit: checkpoint: %w", err)
	}
	now := c.now().UTC().Truncate(time.Microsecond)
	if head.Seq <= last.Seq || (last.Seq > 0 && now.Sub(last.At) < c.every) {
		return store.AuditCheckpoint{}, false, nil
	}
	signer, err := c.keys.Signer(ctx)
	if err != nil {
		return store.AuditCheckpoint{}, false, err
	}
	body := Checkpoint{Origin: c.origin, Seq: head.Seq, Hash: head.Hash, At: now}
	signed, err := note.Sign(&note.Note{Text: body.text()}, signer)
	if err != nil {
		return store.AuditCheckpoint{}, false, fmt.Errorf("audit: sign checkpoint: %w", err)
	}
	cp := store.AuditCheckpoint{Seq: head.Seq, Hash: head.Hash, At: now, Note: string(signed)}
	switch err := c.st.InsertAuditCheckpoint(ctx, cp); {
	case errors.Is(err, store.ErrConflict):
		return store.AuditCheckpoint{}, false, nil
	case err != nil:
		return store.AuditCheckpoint{}, false, fmt.Errorf("audit: store checkpoint: %w", err)
	}
	return cp, true, nil
}
