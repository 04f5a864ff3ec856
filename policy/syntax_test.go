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

// TestShapeLimits: a file larger than 1 MiB, or nested deeper than
// maxNesting, is refused before Cedar parses it, instead of exhausting
// the stack.
func TestShapeLimits(t *testing.T) {
	const head = `@id("a") permit (principal, action, resource) when { `
	nested := func(open, closing string, n int) string {
		return head + strings.Repeat(open, n) + "true" + strings.Repeat(closing, n) + " };"
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"a million parentheses", nested("(", ")", 1_000_000), "is larger than 1048576 bytes (1 MiB)"},
		{"parentheses", nested("(", ")", maxNesting), "test.cedar:1:117: brackets and unary operators nest more than 64 deep"},
		{"negations", nested("!", "", 500_000), "nest more than 64 deep"},
		{"sets", head + strings.Repeat("[", 100) + "1" + strings.Repeat("]", 100) + ".contains(1) };", "nest more than 64 deep"},
		{"records", head + strings.Repeat(`{"a": `, 100) + "1" + strings.Repeat("}", 100) + ` == context };`, "nest more than 64 deep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.cedar", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	// Up to the bound, and in strings and comments, nesting is fine.
	for _, src := range []string{
		nested("(", ")", maxNesting-1),
		nested("!", "", maxNesting-1),
		head + `resource.name == "` + strings.Repeat("(", 1000) + `" } // ` + strings.Repeat("(", 1000) + "\n;",
	} {
		if _, err := Parse("test.cedar", []byte(src)); err != nil {
			t.Errorf("%.80s…: %v", src, err)
		}
	}
	path := filepath.Join(t.TempDir(), "big.cedar")
	if err := os.WriteFile(path, []byte(strings.Repeat(" ", MaxFileSize+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Errorf("Load of a file over 1 MiB: %v", err)
	}
}
