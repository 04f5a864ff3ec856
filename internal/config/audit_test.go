package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAuditSinks(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "siem-secret")
	if err := os.WriteFile(secretFile, []byte(strings.Repeat("k", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, `
audit:
  sinks:
    - name: siem
      webhook:
        url: https://siem.example/usher
        secret_file: `+secretFile+`
    - name: local
      file:
        path: `+filepath.Join(dir, "audit.jsonl")+`
    - name: stdout
      file:
        path: "-"
    - name: dev-siem
      webhook:
        url: http://127.0.0.1:9000/usher
        secret_file: `+secretFile+`
`)
	c, err := Load(p, env(nil), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Audit.Sinks) != 4 || c.Audit.Sinks[0].Webhook.URL != "https://siem.example/usher" || c.Audit.Sinks[1].File == nil {
		t.Fatalf("sinks = %+v", c.Audit.Sinks)
	}
	if s, err := c.Audit.Sinks[0].Webhook.Secret(); err != nil || string(s) != strings.Repeat("k", 40) {
		t.Fatalf("Secret = %q, %v", s, err)
	}
}

func TestAuditSinksRefused(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "siem-secret")
	short := filepath.Join(dir, "short")
	for f, v := range map[string]string{secretFile: strings.Repeat("k", 40), short: "pw"} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ name, sinks, want string }{
		{"bad URL", "- name: a\n  webhook: {url: 'not a url', secret_file: " + secretFile + "}", "audit.sinks[0].webhook.url: must be an absolute URL"},
		{"http on a non-loopback host", "- name: a\n  webhook: {url: 'http://siem.example/usher', secret_file: " + secretFile + "}", "audit.sinks[0].webhook.url: must be https (http only on a loopback host)"},
		{"query in the URL", "- name: a\n  webhook: {url: 'https://siem.example/usher?token=x', secret_file: " + secretFile + "}", "audit.sinks[0].webhook.url: must not have user info, query or fragment"},
		{"missing secret file", "- name: a\n  webhook: {url: 'https://siem.example/usher', secret_file: " + filepath.Join(dir, "absent") + "}", "audit.sinks[0].webhook.secret_file: open "},
		{"no secret file", "- name: a\n  webhook: {url: 'https://siem.example/usher'}", "audit.sinks[0].webhook.secret_file: is required"},
		{"short secret", "- name: a\n  webhook: {url: 'https://siem.example/usher', secret_file: " + short + "}", "audit.sinks[0].webhook.secret_file: the secret must have at least 32 characters"},
		{"duplicate names", "- name: a\n  file: {path: '-'}\n- name: a\n  file: {path: '-'}", `audit.sinks[1].name: "a" is given twice`},
		{"bad name", "- name: 'SIEM one'\n  file: {path: '-'}", "audit.sinks[0].name: want lowercase"},
		{"no name", "- file: {path: '-'}", "audit.sinks[0].name: want lowercase"},
		{"both kinds", "- name: a\n  file: {path: '-'}\n  webhook: {url: 'https://siem.example/usher', secret_file: " + secretFile + "}", "audit.sinks[0]: needs exactly one of webhook and file"},
		{"neither kind", "- name: a", "audit.sinks[0]: needs exactly one of webhook and file"},
		{"no path", "- name: a\n  file: {}", "audit.sinks[0].file.path: is required"},
		{"no directory", "- name: a\n  file: {path: " + filepath.Join(dir, "absent", "audit.jsonl") + "}", "audit.sinks[0].file.path: its directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			indented := "    " + strings.ReplaceAll(c.sinks, "\n", "\n    ")
			_, err := Load(writeFile(t, "audit:\n  sinks:\n"+indented+"\n"), env(nil), Overrides{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to name %q", err, c.want)
			}
		})
	}
	// A list of sinks is for the file only.
	if _, err := Load("", env(map[string]string{"USHER_AUDIT_SINKS": "x"}), Overrides{}); err == nil || !strings.Contains(err.Error(), "audit.sinks") {
		t.Fatalf("err = %v", err)
	}
}
