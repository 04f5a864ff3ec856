package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSyntaxErrors: a file that does not parse is reported once, by its
// name and the line:column of the mistake, with invisible characters
// named.
func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"statement without its semicolon", "@id(\"p1\")\npermit (principal, action, resource)\nwhen { true }\n\n@id(\"p2\")\npermit (principal, action, resource);\n",
			`p.cedar:3:14: syntax error: expected ";" here, found "@" at 5:1 (does the statement end without it?)`},
		{"missing comma", "@id(\"a\")\npermit (principal action, resource);\n",
			`p.cedar:2:19: syntax error: expected "," here, found "action"`},
		{"zero-width space", "@id(\"a\")\npermit (principal, action, resource\u200b);\n",
			`p.cedar:2:36: syntax error: expected ")" here, found "\u200b" (the invisible character U+200B)`},
		{"byte order mark", "\ufeff@id(\"a\")\npermit (principal, action, resource);\n",
			`p.cedar:1:1: the file starts with a byte order mark (U+FEFF, an invisible character)`},
		{"byte order mark inside", "@id(\"a\")\n\ufeffpermit (principal, action, resource);\n",
			`U+FEFF`},
		{"unterminated string", "@id(\"a\")\npermit (principal, action, resource) when { resource.name == \"x };\n",
			`p.cedar:2:62: syntax error: literal not terminated`},
		{"invalid expression", "@id(\"a\")\npermit (principal, action, resource) when { resource.name == };\n",
			`p.cedar:2:`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.cedar", []byte(tt.src))
			if err == nil {
				t.Fatal("parsed")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("got  %s\nwant %s", msg, tt.want)
			}
			for _, bad := range []string{"<input>", "policy", "parser error", "exact got"} {
				if strings.Contains(msg, bad) {
					t.Errorf("%q in %s", bad, msg)
				}
			}
		})
	}
}

// TestLoadNamesTheFile: Load's errors leave it to the caller to say
// "policy", once.
func TestLoadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.cedar")); err == nil || strings.Contains(err.Error(), "policy") || !strings.Contains(err.Error(), "missing.cedar") {
		t.Errorf("a missing file: %v", err)
	}
	path := filepath.Join(dir, "p2.cedar")
	if err := os.WriteFile(path, []byte("@id(\"a\") permit (principal, action, resource)\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.HasPrefix(err.Error(), path+":1:46: syntax error") {
		t.Errorf("got %v", err)
	}
}
