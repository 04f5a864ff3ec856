package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/usherhq/usher/internal/httpx"
)

// Audit configures the audit log: its signed checkpoints and its delivery.
type Audit struct {
	// CheckpointInterval is the least time between two signed checkpoints
	// of the log's head; one is signed only when records were appended
	// since the last. Default 1m; 1s to 24h.
	CheckpointInterval Duration `yaml:"checkpoint_interval"`
	// CheckpointOrigin names the log in its checkpoints and its key.
	// Default: the host of server.public_url, or of the address served
	// on.
	CheckpointOrigin string `yaml:"checkpoint_origin"`
	// Sinks are where the audit log is delivered, each record at least
	// once (see AuditSink). Only in the file. Default none.
	Sinks []AuditSink `yaml:"sinks"`
}

// AuditSink is one destination of the audit log (audit.sinks): exactly one
// of Webhook and File.
type AuditSink struct {
	// Name names the sink and its cursor in the database: lowercase
	// letters, digits, '-' and '_', at most 63, starting with a letter or
	// digit. Renaming a sink starts it again from the first record.
	Name    string       `yaml:"name"`
	Webhook *WebhookSink `yaml:"webhook"`
	File    *FileSink    `yaml:"file"`
}

// WebhookSink posts batches of JSON lines to a SIEM's endpoint.
type WebhookSink struct {
	// URL is the endpoint: https, or http on a loopback host.
	URL string `yaml:"url"`
	// SecretFile names a file holding the secret (one trailing newline is
	// ignored), at least 32 characters: sent as the bearer token, and the
	// key of each batch's HMAC-SHA256 signature.
	SecretFile string `yaml:"secret_file"`
}

// FileSink appends JSON lines to a file.
type FileSink struct {
	// Path is the file, created with mode 0600 in a directory that must
	// exist; "-" is standard output.
	Path string `yaml:"path"`
}

// Secret reads the webhook's secret from SecretFile.
func (w WebhookSink) Secret() ([]byte, error) {
	return readSecretFile(w.SecretFile)
}

// readSecretFile reads a mounted secret: one trailing newline is ignored,
// and it must have at least minClientSecretLen characters.
func readSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) < minClientSecretLen {
		return nil, fmt.Errorf("the secret must have at least %d characters", minClientSecretLen)
	}
	return b, nil
}

// sinkName is what an audit sink's name must look like.
var sinkName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// validate reports the problems of the audit section.
func (a Audit) validate(bad reporter) {
	if d := a.CheckpointInterval.Std(); d < time.Second || d > 24*time.Hour {
		bad("audit.checkpoint_interval", "must be between 1s and 24h, got %s", d)
	}
	if o := a.CheckpointOrigin; o != "" && strings.ContainsFunc(o, func(r rune) bool { return r <= ' ' || r == '+' || r == 0x7f }) {
		bad("audit.checkpoint_origin", "must have no spaces, control characters or '+', got %q", o)
	}
	seen := map[string]bool{}
	for i, s := range a.Sinks {
		key := fmt.Sprintf("audit.sinks[%d]", i)
		switch {
		case !sinkName.MatchString(s.Name):
			bad(key+".name", "want lowercase letters, digits, '-' and '_' (at most 63), got %q", s.Name)
		case seen[s.Name]:
			bad(key+".name", "%q is given twice", s.Name)
		}
		seen[s.Name] = true
		switch {
		case (s.Webhook == nil) == (s.File == nil):
			bad(key, "needs exactly one of webhook and file")
		case s.Webhook != nil:
			if err := httpx.CheckEndpoint(s.Webhook.URL); err != nil {
				bad(key+".webhook.url", "%v, got %q", err, s.Webhook.URL)
			}
			if s.Webhook.SecretFile == "" {
				bad(key+".webhook.secret_file", "is required")
			} else if _, err := s.Webhook.Secret(); err != nil {
				bad(key+".webhook.secret_file", "%v", err)
			}
		case s.File.Path == "":
			bad(key+".file.path", "is required (\"-\" for standard output)")
		case s.File.Path != "-":
			if fi, err := os.Stat(filepath.Dir(s.File.Path)); err != nil || !fi.IsDir() {
				bad(key+".file.path", "its directory %s does not exist", filepath.Dir(s.File.Path))
			}
		}
	}
}
