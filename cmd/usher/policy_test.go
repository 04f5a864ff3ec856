package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestPolicyExplainFeatures shows `usher policy explain` deciding a
// resource read, a read through a template, a prompt get and completions
// of an upstream's prompt and template, each with the server and
// definition hash the catalog reads from a real upstream, as the MCP
// server decides them; and refusing what it cannot explain.
func TestPolicyExplainFeatures(t *testing.T) {
	t.Parallel()
	up := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			t.Error("the upstream was asked to complete")
			return &mcp.CompleteResult{}, nil
		},
	})
	never := func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		t.Error("the upstream was read")
		return &mcp.ReadResourceResult{}, nil
	}
	up.AddResource(&mcp.Resource{URI: "file:///guide.md", Name: "guide"}, never)
	up.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "file:///notes/{name}", Name: "notes"}, never)
	up.AddPrompt(&mcp.Prompt{Name: "summarize", Arguments: []*mcp.PromptArgument{{Name: "topic"}}}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		t.Error("the upstream's prompt was got")
		return &mcp.GetPromptResult{}, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(ts.Close)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "usher.yaml")
	pol := filepath.Join(dir, "policy.cedar")
	if err := writeTestFile(cfg, fmt.Sprintf("mcp:\n  upstreams:\n    - name: docs\n      url: %q\n", ts.URL)); err != nil {
		t.Fatal(err)
	}
	if err := writeTestFile(pol, `@id("allow-the-guide") @outcome("allow")
permit (principal, action == Usher::Action::"read_resource", resource == Usher::Resource::"docs__file:///guide.md")
when { resource.server == "docs" };
@id("deny-completions-of-notes")
forbid (principal, action == Usher::Action::"complete", resource is Usher::Resource)
when { resource.template == "docs__file:///notes/{name}" };
`); err != nil {
		t.Fatal(err)
	}
	explain := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		args = append([]string{"policy", "explain", "--user", "https://issuer.example|t|alice", "--policy", pol}, args...)
		err := run(t.Context(), append(args, "--data-dir", filepath.Join(dir, "data"), "--config", cfg), getenv(nil), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	hash := regexp.MustCompile(`definition:  sha256:[0-9a-f]{64}\n`)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"a listed resource", []string{"--action", "read_resource", "--resource", "docs__file:///guide.md"}, []string{
			"decision:    allow\n", "action:      read_resource\n", `target:      Usher::Resource::"docs__file:///guide.md", server "docs"`,
			"policies:    allow-the-guide\n",
		}},
		{"a URI of a template", []string{"--action", "read_resource", "--resource", "docs__file:///notes/todo"}, []string{
			"decision:    approve\n", `Usher::Resource::"docs__file:///notes/todo"`, `template:    "docs__file:///notes/{name}"` + "\n", "no policy matched",
		}},
		{"a prompt", []string{"--action", "get_prompt", "--prompt", "docs__summarize", "--args", `{"topic":"x"}`}, []string{
			"decision:    approve\n", "action:      get_prompt\n", `target:      Usher::Prompt::"docs__summarize", server "docs"`,
		}},
		{"a completion of a prompt's argument", []string{"--action", "complete", "--prompt", "docs__summarize", "--argument", "topic=we"}, []string{
			"decision:    approve\n", "action:      complete\n", `completes:   prompt argument "topic", value "we"` + "\n",
		}},
		{"a completion of a template's variable", []string{"--action", "complete", "--template", "docs__file:///notes/{name}", "--argument", "name=to"}, []string{
			"decision:    deny\n", `Usher::Resource::"docs__file:///notes/{name}"`, `completes:   template variable "name", value "to"` + "\n",
			"policies:    deny-completions-of-notes\n",
		}},
		{"a resource explained without the catalog", []string{"--action", "read_resource", "--resource", "other__x://y", "--server", "other", "--definition-hash", "sha256:1"}, []string{
			"decision:    approve\n", `Usher::Resource::"other__x://y", server "other"`, "definition:  sha256:1\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := explain(tc.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("lacks %q:\n%s", want, out)
				}
			}
			if !hash.MatchString(out) && !strings.Contains(out, "sha256:1\n") {
				t.Errorf("no definition hash from the catalog:\n%s", out)
			}
		})
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown resource", []string{"--action", "read_resource", "--resource", "docs__file:///nowhere"}, "give its server and definition hash"},
		{"a resource of another server", []string{"--action", "read_resource", "--resource", "docs__file:///guide.md", "--server", "wiki"}, `of server "docs", not "wiki"`},
		{"a hash without a server", []string{"--action", "get_prompt", "--prompt", "x", "--definition-hash", "sha256:1"}, "server names the upstream"},
		{"a tool and a resource", []string{"--action", "read_resource", "--resource", "docs__file:///guide.md", "--tool", "notes_list"}, "exactly one of resource"},
		{"a prompt for a read", []string{"--action", "read_resource", "--prompt", "docs__summarize"}, "exactly one of resource"},
		{"a completion without its argument", []string{"--action", "complete", "--prompt", "docs__summarize"}, "argument NAME=VALUE"},
		{"an unknown action", []string{"--action", "delete_resource", "--resource", "docs__file:///guide.md"}, "is not call_tool"},
		{"no tool", nil, "--tool is required"},
		{"no resource", []string{"--action", "read_resource"}, "--resource is required with --action read_resource"},
		{"no prompt", []string{"--action", "get_prompt"}, "--prompt is required"},
		{"nothing to complete", []string{"--action", "complete", "--argument", "a=b"}, "--prompt or --template is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := explain(tc.args...)
			if err == nil || !strings.Contains(out+err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q:\n%s", err, tc.want, out)
			}
			if errors.Is(err, errFailed) {
				t.Errorf("a refusal is not a failed check: %v", err)
			}
		})
	}
}

// TestPolicyCheckLock: a lock named with --lock must exist, while the
// configured one may be absent, which the output says.
func TestPolicyCheckLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	check := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(t.Context(), append(append([]string{"policy", "check"}, args...), "--data-dir", dir), getenv(nil), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	typo := filepath.Join(dir, "typo.lok")
	if out, err := check("--lock", typo); err == nil || !strings.Contains(out+err.Error(), "typo.lok: no such file") {
		t.Errorf("a missing --lock file passed: %v\n%s", err, out)
	}
	out, err := check()
	if want := "no tool lock at " + filepath.Join(dir, "tools.lock"); err != nil || !strings.Contains(out, want) || !strings.Contains(out, "default.cedar: valid") {
		t.Errorf("without a lock: %v, want %q:\n%s", err, want, out)
	}
}

// TestServeRefusesAPolicyOffTheModel: serve refuses to start with a
// statement that would error on every request (and so deny it), with the
// finding `usher policy check` prints, by line.
func TestServeRefusesAPolicyOffTheModel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.cedar")
	if err := writeTestFile(pol, "@id(\"deny-hr\")\nforbid (principal, action, resource) when { resource.sever == \"hr\" };\n"); err != nil {
		t.Fatal(err)
	}
	want := pol + `:2:54: Usher::Prompt, Usher::Resource and Usher::Tool have no attribute "sever" (did you mean "server"?)`
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"policy", "check", "--policy", pol, "--data-dir", filepath.Join(dir, "check")}, getenv(nil), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("policy check = %v, want %q\n%s%s", err, want, &out, &errOut)
	}
	// Bounded, so that a serve that wrongly starts ends the test.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")},
		getenv(map[string]string{"USHER_POLICY_FILE": pol}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("serve = %v, want it refused with %q", err, want)
	}
}
