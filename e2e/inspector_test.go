package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestInspectorCLI tries the embedded default as a new user would, with the
// MCP Inspector's command-line client: a broker token from
// `usher token mcp`, then tools/list and tools/call over streamable HTTP.
func TestInspectorCLI(t *testing.T) {
	nt := requireTools(t)
	t.Parallel()
	u := startUsher(t, "", "")
	token := u.brokerToken(t, "alice")
	home := t.TempDir()

	inspect := func(t *testing.T, withToken bool, request ...string) (inspectorOutput, error) {
		t.Helper()
		bearer := ""
		if withToken {
			bearer = token
		}
		return runInspector(t, nt, home, u.url+"/mcp", bearer, request...)
	}

	t.Run("tools/list", func(t *testing.T) {
		out, err := inspect(t, true, "--method", "tools/list")
		if err != nil {
			t.Fatalf("tools/list failed: %v", err)
		}
		var res struct {
			Tools []struct{ Name string } `json:"tools"`
		}
		if err := json.Unmarshal(out.Result, &res); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		// The default policy allows the reads, holds notes_write for
		// approval and denies notes_delete, which is therefore hidden.
		want := []string{"approvals_list", "notes_list", "notes_read", "notes_write", "session_read", "sessions_list"}
		if !slices.Equal(names, want) {
			t.Errorf("tools = %q, want %q", names, want)
		}
	})

	t.Run("tools/call notes_list", func(t *testing.T) {
		out, err := inspect(t, true, "--method", "tools/call", "--tool-name", "notes_list")
		if err != nil {
			t.Fatalf("notes_list failed: %v", err)
		}
		var res struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Notes *[]json.RawMessage `json:"notes"`
			} `json:"structuredContent"`
		}
		if err := json.Unmarshal(out.Result, &res); err != nil {
			t.Fatal(err)
		}
		if res.IsError || res.StructuredContent.Notes == nil || len(*res.StructuredContent.Notes) != 0 {
			t.Errorf("notes_list = %s, want no notes and no error", out.Result)
		}
	})

	t.Run("tools/call notes_write needs approval", func(t *testing.T) {
		out, err := inspect(t, true, "--method", "tools/call", "--tool-name", "notes_write",
			"--tool-args-json", `{"name":"groceries","body":"milk"}`)
		if err == nil {
			t.Error("the Inspector exited 0 for a result with isError")
		}
		var res struct {
			IsError bool `json:"isError"`
			Meta    struct {
				Approval struct {
					ID, Status, URL string
				} `json:"usher/approval"`
			} `json:"_meta"`
		}
		if err := json.Unmarshal(out.Result, &res); err != nil {
			t.Fatal(err)
		}
		a := res.Meta.Approval
		if !res.IsError || a.ID == "" || a.Status != "pending" || a.URL != u.url+"/approvals/"+a.ID {
			t.Errorf("notes_write = %s, want a pending approval at %s/approvals/<id>", out.Result, u.url)
		}
	})

	t.Run("no token", func(t *testing.T) {
		out, err := inspect(t, false, "--method", "tools/list")
		if err == nil || out.Error == nil || out.Result != nil {
			t.Errorf("tools/list without a token: exit %v, %+v; want an error and no result", err, out)
		}
	})

	// The sessionless protocol 2026-07-28, which requires a cacheScope on
	// tools/list and a resultType on every tools/call result (the
	// Inspector refuses a result without one, and prints neither field:
	// mcpserver's tests check them on the wire).
	t.Run("protocol era modern", func(t *testing.T) {
		out, err := inspect(t, true, "--protocol-era", "modern", "--method", "tools/list")
		if err != nil {
			t.Fatalf("tools/list failed: %v (%+v)", err, out.Error)
		}
		var list struct {
			Tools []struct{ Name string } `json:"tools"`
		}
		if err := json.Unmarshal(out.Result, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Tools) != 6 {
			t.Errorf("tools/list lists %d tools, want 6", len(list.Tools))
		}
		out, err = inspect(t, true, "--protocol-era", "modern", "--method", "tools/call", "--tool-name", "notes_list")
		if err != nil {
			t.Fatalf("tools/call notes_list failed: %v (%+v)", err, out.Error)
		}
		var res struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Notes *[]json.RawMessage `json:"notes"`
			} `json:"structuredContent"`
		}
		if err := json.Unmarshal(out.Result, &res); err != nil {
			t.Fatal(err)
		}
		if res.IsError || res.StructuredContent.Notes == nil {
			t.Errorf("notes_list = %s, want the notes and no error", out.Result)
		}
	})
}

// inspectorOutput is what the Inspector CLI prints with --format json: the
// result on stdout, or an error on stderr.
type inspectorOutput struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// runInspector runs the Inspector CLI against the MCP endpoint, with the
// bearer token unless it is "", and decodes its JSON output.
func runInspector(t *testing.T, nt nodeTools, home, endpoint, token string, request ...string) (inspectorOutput, error) {
	t.Helper()
	args := append([]string{"--cli", endpoint, "--transport", "http", "--format", "json"}, request...)
	if token != "" {
		args = append(args, "--header", "Authorization: Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, stderr, err := nt.run(ctx, home, "mcp-inspector", args...)
	var out inspectorOutput
	text := stdout
	if strings.TrimSpace(text) == "" {
		text = stderr
	}
	// The JSON object is the last line; a warning may come before it.
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &out); jerr != nil {
		t.Fatalf("inspector %s: %v; its output is not JSON: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(request, " "), err, jerr, stdout, stderr)
	}
	t.Logf("inspector %s (token: %v): exit %v\n%s", strings.Join(request, " "), token != "", err, lines[len(lines)-1])
	return out, err
}
