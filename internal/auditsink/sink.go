package auditsink

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/usherhq/usher/internal/httpx"
)

// Sink receives batches of lines.
type Sink interface {
	// Send delivers body, one or more lines each ending in a newline. It
	// returns nil only once the sink holds the batch; a *RetryAfter error
	// when the sink asks for a wait before the next attempt.
	Send(ctx context.Context, body []byte) error
}

// RetryAfter is the error of a sink that asked to be tried again after
// Wait (a webhook's 429 or 503 with a Retry-After header).
type RetryAfter struct {
	Wait time.Duration
	Err  error
}

func (e *RetryAfter) Error() string { return fmt.Sprintf("%v (retry after %s)", e.Err, e.Wait) }

// Unwrap returns the sink's error.
func (e *RetryAfter) Unwrap() error { return e.Err }

// File appends batches to a file, or writes them to standard output.
type File struct {
	path   string
	stdout io.Writer
	mu     sync.Mutex // one batch at a time: the records' and the checkpoints' share it
}

// Stdout is the path of a File that writes to standard output.
const Stdout = "-"

// NewFile returns a sink appending to the file at path, created with mode
// 0600 if missing, or writing to stdout when path is Stdout.
func NewFile(path string, stdout io.Writer) (*File, error) {
	if path == "" {
		return nil, errors.New("auditsink: a file sink needs a path")
	}
	if path == Stdout && stdout == nil {
		return nil, errors.New("auditsink: a file sink on standard output needs a writer")
	}
	return &File{path: path, stdout: stdout}, nil
}

// Send appends body and syncs the file before it returns: a batch
// acknowledged is on disk. The file is opened for each batch, so that a
// rotated file is followed by a new one.
func (f *File) Send(_ context.Context, body []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.path == Stdout {
		_, err := f.stdout.Write(body)
		return err
	}
	fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fh.Write(body)
	if err == nil {
		err = fh.Sync()
	}
	return errors.Join(err, fh.Close())
}

// SignatureHeader is the header of a webhook batch that carries
// "sha256=" and the lowercase hex HMAC-SHA256 of the body, keyed by the
// webhook's secret.
const SignatureHeader = "Usher-Signature"

// Signature returns SignatureHeader's value for body under secret.
func Signature(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// DefaultWebhookTimeout bounds a webhook's send when NewWebhook is given
// no client.
const DefaultWebhookTimeout = 10 * time.Second

// MaxRetryAfter bounds the wait a webhook's Retry-After may ask for.
const MaxRetryAfter = time.Hour

// Webhook posts batches to an HTTPS endpoint (http on loopback only),
// with the secret as a bearer token and an HMAC-SHA256 of the body.
type Webhook struct {
	url    string
	secret []byte
	client *http.Client
	now    func() time.Time
}

// NewWebhook returns a sink posting to url. client nil means a client with
// DefaultWebhookTimeout; the sink never follows redirects, so that the
// secret goes to url only.
func NewWebhook(url string, secret []byte, client *http.Client) (*Webhook, error) {
	var errs []error
	if err := httpx.CheckEndpoint(url); err != nil {
		errs = append(errs, fmt.Errorf("webhook url %w", err))
	}
	if len(secret) == 0 {
		errs = append(errs, errors.New("webhook secret is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("auditsink: %w", err)
	}
	c := http.Client{Timeout: DefaultWebhookTimeout}
	if client != nil {
		c = *client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Webhook{url: url, secret: secret, client: &c, now: time.Now}, nil
}

// Send posts body: any 2xx answer acknowledges it.
func (w *Webhook) Send(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Authorization", "Bearer "+string(w.secret))
	req.Header.Set(SignatureHeader, Signature(w.secret, body))
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("webhook answered %s", resp.Status)
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if wait, ok := retryAfter(resp.Header.Get("Retry-After"), w.now()); ok {
			return &RetryAfter{Wait: wait, Err: err}
		}
	}
	return err
}

// retryAfter reads a Retry-After value (RFC 9110 §10.2.3): seconds, or an
// HTTP date; at most MaxRetryAfter.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		d = time.Duration(min(n, int64(MaxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = max(t.Sub(now), 0)
	} else {
		return 0, false
	}
	return min(d, MaxRetryAfter), true
}

// Spec is a sink as configured (audit.sinks): a webhook (WebhookURL and
// Secret) or a file (FilePath, Stdout for standard output).
type Spec struct {
	Name       string
	WebhookURL string
	Secret     []byte
	FilePath   string
}

// NewTarget returns the target spec describes, whose File writes
// standard output to stdout.
func NewTarget(spec Spec, stdout io.Writer) (Target, error) {
	t := Target{Name: spec.Name}
	var err error
	switch {
	case spec.WebhookURL != "" && spec.FilePath != "":
		err = fmt.Errorf("auditsink: sink %q is both a webhook and a file", spec.Name)
	case spec.WebhookURL != "":
		t.Sink, err = NewWebhook(spec.WebhookURL, spec.Secret, nil)
	default:
		t.Sink, err = NewFile(spec.FilePath, stdout)
	}
	return t, err
}
