package policy

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, and that any policy it accepts
// can be decided and linted without panicking and never allows an
// unreviewed tool.
func FuzzParse(f *testing.F) {
	f.Add(string(defaultSource))
	f.Add(testPolicy)
	f.Add(`@id("a") @outcome("allow") permit (principal, action, resource) when { context.arguments.x.y like "*" };`)
	f.Add(`@id("a") forbid (principal, action, resource) unless { principal.groups.containsAny(["a"]) && decimal("1.5").lessThan(context.arguments.n) };`)
	f.Add(`@id("a") @approvers(",") permit (principal, action, resource is Usher::Tool in Usher::Tool::"x");`)
	f.Fuzz(func(t *testing.T, src string) {
		p, err := Parse("fuzz.cedar", []byte(src))
		if err != nil {
			return
		}
		if len(p.Hash()) != 64 {
			t.Fatalf("hash %q", p.Hash())
		}
		_ = p.Lint(&Lock{Tools: map[string]string{"x": hashA}})
		req := call("x", `{"x":{"y":"z"},"n":1.5}`)
		req.Tool.Reviewed = false
		if d := p.Decide(req); d.Outcome == Allow {
			t.Fatalf("allowed an unreviewed tool: %q", d.Reasons)
		}
	})
}

// fuzzPolicy allows every tool unattended unless the arguments say
// otherwise, so that only Go's fail-closed rules stand between a fuzzed
// request and Allow.
const fuzzPolicy = `
@id("allow-all") @outcome("allow")
permit (principal, action, resource);

@id("deny-secret-path")
forbid (principal, action, resource)
when { context.arguments has path && context.arguments.path like "/secret/*" };

@id("approve-big")
permit (principal, action, resource)
when { context.arguments has n && context.arguments.n > 100 };
`

// FuzzDecide checks that Decide never panics, never allows an unreviewed
// tool or a tool whose name is not plain ASCII, and denies arguments that
// are not a JSON object.
func FuzzDecide(f *testing.F) {
	p := mustParse(f, fuzzPolicy)
	f.Add([]byte(`{"path":"/secret/x"}`), "notes_list", true, "staff")
	f.Add([]byte(`{"n":101}`), "notes_list", true, "")
	f.Add([]byte(`{"n":"101","a":[1,[2,[3]],{"b":null}]}`), "notes_list\u200b", true, "a,b")
	f.Add([]byte(`[]`), "x", true, "")
	f.Add([]byte(`{"a":1,"a":2}`), "x", false, "")
	f.Add([]byte(`{"d":1.23456789,"e":1e400}`), "x", true, "")
	f.Fuzz(func(t *testing.T, args []byte, name string, reviewed bool, group string) {
		req := call(name, string(args))
		req.Tool.Reviewed = reviewed
		req.Principal.Groups = []string{group}
		d := p.Decide(req)
		if d.Outcome > Allow {
			t.Fatalf("invalid outcome %d", d.Outcome)
		}
		if d.Outcome == Allow && (!reviewed || !plainName.MatchString(name)) {
			t.Fatalf("allowed %+q (reviewed %v): %q", name, reviewed, d.Reasons)
		}
		if a := bytes.TrimSpace(args); d.Outcome != Deny && len(a) > 0 && string(a) != "null" && a[0] != '{' {
			t.Fatalf("arguments %q are not an object but got %s", args, d.Outcome)
		}
	})
}

// FuzzParseLock checks that lock parsing never panics and that any lock it
// accepts survives a write and a read.
func FuzzParseLock(f *testing.F) {
	f.Add([]byte(`{"version":1,"tools":{"a":"` + hashA + `"}}`))
	f.Add([]byte(`{"version":1,"tools":{"a":"` + hashA + `","a":"` + hashB + `"}}`))
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := parseLock(data)
		if err != nil {
			return
		}
		out, err := json.Marshal(lockFile{Version: LockVersion, Tools: l.Tools})
		if err != nil {
			t.Fatal(err)
		}
		back, err := parseLock(out)
		if err != nil {
			t.Fatalf("re-encoded lock rejected: %v", err)
		}
		if !reflect.DeepEqual(back, l) {
			t.Fatalf("round trip changed the lock: %v != %v", back, l)
		}
	})
}

// FuzzParseCases checks that case-file parsing never panics.
func FuzzParseCases(f *testing.F) {
	seed, err := os.ReadFile("testdata/default-cases.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("cases:\n  - {name: &n a, user: u, tool: t, expect: deny, args: {b: *n, c: [1, {d: .nan}]}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = parseCases(data)
	})
}
