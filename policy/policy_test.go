package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each must appear in the error
	}{
		{"missing @id", `permit (principal, action, resource);`,
			[]string{"test.cedar:1:1: policy has no @id annotation"}},
		{"duplicate @id", `@id("a") permit (principal, action, resource); @id("a") forbid (principal, action, resource);`,
			[]string{`duplicate @id("a"), first used at test.cedar:1:1`}},
		{"empty @id", `@id("") permit (principal, action, resource);`, []string{`@id("") must be`}},
		{"@id with a space", `@id("allow reads") permit (principal, action, resource);`, []string{`@id("allow reads") must be`}},
		{"@id with a newline", `@id("a\nb") permit (principal, action, resource);`, []string{`@id("a\nb") must be`}},
		{"unknown annotation", `@id("a") @approver("security") permit (principal, action, resource);`,
			[]string{"unknown annotation @approver"}},
		{"unknown @outcome", `@id("a") @outcome("alow") permit (principal, action, resource);`,
			[]string{`unknown @outcome("alow")`}},
		{"deny @outcome on a permit", `@id("a") @outcome("deny") permit (principal, action, resource);`,
			[]string{`unknown @outcome("deny")`}},
		{"allow @outcome on a forbid", `@id("a") @outcome("allow") forbid (principal, action, resource);`,
			[]string{`a forbid always denies: @outcome("allow")`}},
		{"@approvers on an allow permit", `@id("a") @outcome("allow") @approvers("x") permit (principal, action, resource);`,
			[]string{"@approvers is only allowed"}},
		{"@approvers on a forbid", `@id("a") @approvers("x") forbid (principal, action, resource);`,
			[]string{"@approvers is only allowed"}},
		{"@approvers with an empty group", `@id("a") @approvers("x,,y") permit (principal, action, resource);`,
			[]string{`@approvers("x,,y") names an empty`}},
		{"@reason with a newline", `@id("a") @reason("fine\nforged line") permit (principal, action, resource);`,
			[]string{"@reason holds U+000A"}},
		{"@reason with a bidi control", "@id(\"a\") @reason(\"harmless \u202Eetirw\") permit (principal, action, resource);",
			[]string{"@reason holds U+202E, an invisible or control character"}},
		{"@reason with a zero-width space", "@id(\"a\") @reason(\"a\u200Bb\") permit (principal, action, resource);",
			[]string{"@reason holds U+200B"}},
		{"@reason too long", `@id("a") @reason("` + strings.Repeat("é", 501) + `") permit (principal, action, resource);`,
			[]string{"@reason is 501 characters long; at most 500"}},
		{"syntax error", `@id("a") permit (principal, action, resource)`, []string{`test.cedar:1:46: syntax error: expected ";" here`}},
		{"duplicate annotation", `@id("a") @id("b") permit (principal, action, resource);`, []string{"duplicate annotation"}},
		{"every problem at once", `permit (principal, action, resource);
@id("b") @outcome("maybe") permit (principal, action, resource);`,
			[]string{"test.cedar:1:1: policy has no @id", `test.cedar:2:1: unknown @outcome("maybe")`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("test.cedar", []byte(tt.src))
			if err == nil {
				t.Fatalf("parsed: %v", p.rules)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	for _, src := range []string{
		``,
		`// only a comment`,
		`@id("deny-x") @outcome("deny") forbid (principal, action, resource == Usher::Tool::"x");`,
		`@id("a.b:c/d-e_f") @outcome("approve") @approvers(" security , finance ") @reason("because") permit (principal, action, resource);`,
		`@id("r") @reason("` + strings.Repeat("é", 500) + `") permit (principal, action, resource);`,
		`@id("r2") @reason("naïve café — 日本語 ✓") permit (principal, action, resource);`,
	} {
		if _, err := Parse("test.cedar", []byte(src)); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.cedar")
	if err := os.WriteFile(path, defaultSource, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Hash() != Default().Hash() || p.Name() != path {
		t.Errorf("loaded %s %s", p.Name(), p.Hash())
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.cedar")); err == nil {
		t.Error("loaded a missing file")
	}
	// An invalid file names itself in the error.
	if err := os.WriteFile(path, []byte(`permit (principal, action, resource);`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path+":1:1") {
		t.Errorf("got %v", err)
	}
}

func TestPolicyHash(t *testing.T) {
	src := defaultSource
	sum := sha256.Sum256(src)
	want := hex.EncodeToString(sum[:])
	a, b := mustParse(t, string(src)), mustParse(t, string(src))
	if a.Hash() != want || b.Hash() != want {
		t.Errorf("hash %s, %s, want %s", a.Hash(), b.Hash(), want)
	}
	// One more byte, even one Cedar ignores, is another policy file.
	c := mustParse(t, string(src)+" ")
	if c.Hash() == want {
		t.Error("hash unchanged by an added byte")
	}
	if d := c.Decide(call("notes_list", `{}`)); d.PolicyHash != c.Hash() {
		t.Errorf("decision carries %s, want %s", d.PolicyHash, c.Hash())
	}
}

func TestLint(t *testing.T) {
	lock := &Lock{Tools: map[string]string{"read": "sha256:" + strings.Repeat("0", 64)}}
	tests := []struct {
		name string
		src  string
		lock *Lock
		want []FindingKind
	}{
		{"named reviewed tool", `@id("a") @outcome("allow") permit (principal, action, resource == Usher::Tool::"read");`, lock, nil},
		{"named tool in", `@id("a") @outcome("allow") permit (principal, action, resource in Usher::Tool::"read");`, lock, nil},
		{"named tool without a lock", `@id("a") @outcome("allow") permit (principal, action, resource == Usher::Tool::"new");`, nil, nil},
		{"named tool missing from the lock", `@id("a") @outcome("allow") permit (principal, action, resource == Usher::Tool::"new");`, lock,
			[]FindingKind{UnreviewedAllow}},
		{"any resource", `@id("a") @outcome("allow") permit (principal, action, resource);`, lock, []FindingKind{WildcardAllow}},
		{"any tool", `@id("a") @outcome("allow") permit (principal, action, resource is Usher::Tool);`, lock, []FindingKind{WildcardAllow}},
		{"name in a condition", `@id("a") @outcome("allow") permit (principal, action, resource) when { resource.name == "read" };`, lock,
			[]FindingKind{WildcardAllow}},
		{"reviewed guard is still a wildcard", `@id("a") @outcome("allow") permit (principal, action, resource) when { resource.reviewed };`, lock,
			[]FindingKind{WildcardAllow}},
		{"approve wildcard is fine", `@id("a") permit (principal, action, resource);`, lock, nil},
		{"forbid wildcard is fine", `@id("a") forbid (principal, action, resource);`, lock, nil},
		{"several", `@id("a") @outcome("allow") permit (principal, action, resource);
@id("b") @outcome("allow") permit (principal, action, resource == Usher::Tool::"new");`, lock, []FindingKind{WildcardAllow, UnreviewedAllow}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, tt.src).Lint(tt.lock)
			var kinds []FindingKind
			for _, f := range got {
				kinds = append(kinds, f.Kind)
				if f.PolicyID == "" || !strings.HasPrefix(f.Position, "test.cedar:") || f.Message == "" {
					t.Errorf("incomplete finding %+v", f)
				}
			}
			if strings.Join(toStrings(kinds), ",") != strings.Join(toStrings(tt.want), ",") {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func toStrings(kinds []FindingKind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = string(k)
	}
	return out
}
