package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// seedPerson gives the person p, on s, something of every kind Usher
// keeps of a person: conversations (one deleted) with messages, a branch,
// a pin, an attachment and an approval; an MCP client's approval and
// call; a note, settings, model usage; a browser session, an OAuth code,
// refresh token and consent, an MCP session. The OAuth client is shared.
func seedPerson(t *testing.T, s Store, p string) {
	t.Helper()
	ctx := t.Context()
	now := time.Now().Truncate(time.Microsecond)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("seed %s: %s: %v", p, what, err)
		}
	}
	for i, id := range []string{p + "-run", p + "-gone"} {
		first := NewEvent{Type: "message.user", Payload: json.RawMessage(fmt.Sprintf(`{"content":"the secret plans of %s, %d"}`, p, i))}
		_, _, err := s.OpenRun(ctx, Run{ID: id, Owner: p, Title: "plans of " + p, IdempotencyKey: "key-" + id}, 5, &first)
		must("open run", err)
	}
	_, _, _, err := s.PostMessageOnce(ctx, p+"-run", NewEvent{Type: "message.user", Payload: json.RawMessage(`{"content":"more of ` + p + `"}`)}, "msg-"+p)
	must("post", err)
	_, err = s.PinRun(ctx, p, p+"-run")
	must("pin", err)
	_, err = s.PutAttachment(ctx, Attachment{ID: "att-" + p, Owner: p, Tenant: "t", Name: p + ".txt", ContentType: "text/plain"}, []byte("a file of "+p), 1<<20)
	must("attachment", err)
	for _, run := range []string{p + "-run", ""} {
		b := ApprovalBinding{Principal: p, Tool: "notes_write", DefinitionHash: "d", ArgumentsHash: "a", PolicyHash: "h", RunID: run, ClientID: "usher-assistant"}
		_, _, err = s.CreateApprovalAudited(ctx, Approval{ID: "apr-" + p + run, Binding: b, Arguments: json.RawMessage(`{"body":"` + p + `"}`),
			Reason: "r", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}, nil)
		must("approval", err)
	}
	_, _, err = s.BeginExecutionAudited(ctx, Execution{IdempotencyKey: "mcp/" + p, Principal: p, Tool: "notes_write", ArgumentsHash: "a", StartedAt: now}, nil)
	must("execution", err)
	_, err = s.PutNote(ctx, Note{Owner: p, Name: "todo", Body: "the note of " + p})
	must("note", err)
	_, err = s.PutSettings(ctx, Settings{Principal: p, Instructions: "answer " + p, Theme: "dark", SendKey: "enter"})
	must("settings", err)
	must("usage", s.AddModelUsage(ctx, ModelUsage{Principal: p, Day: UsageDay(now), Model: "m", Purpose: "turn", Requests: 1, InputTokens: 3, OutputTokens: 4}))
	_, err = s.CreateBrowserSession(ctx, BrowserSession{IDHash: "sess-" + p, Principal: p, ExpiresAt: now.Add(time.Hour)})
	must("browser session", err)
	must("code", s.CreateAuthorizationCode(ctx, AuthorizationCode{CodeHash: "code-" + p, ClientID: "shared-client", Principal: p,
		Subject: json.RawMessage(`{"tenant":"t"}`), RedirectURI: "https://shared-client.example/cb",
		CodeChallenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM", Resource: "https://usher.example/mcp",
		Scope: "mcp:invoke", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}))
	must("refresh token", s.IssueRefreshToken(ctx, RefreshToken{TokenHash: "rt-" + p, FamilyID: "fam-" + p, ClientID: "shared-client", Principal: p,
		Subject: json.RawMessage(`{"tenant":"t"}`), Resource: "https://usher.example/mcp", Scope: "mcp:invoke",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), FamilyExpiresAt: now.Add(24 * time.Hour)}))
	_, err = s.PutConsent(ctx, Consent{Principal: p, ClientID: "shared-client", Scope: "mcp:invoke"})
	must("consent", err)
	_, err = s.CreateMCPSession(ctx, MCPSession{ID: "mcp-" + p, Principal: p, State: []byte(`{}`), ExpiresAt: now.Add(time.Hour)})
	must("MCP session", err)
	must("delete", s.DeleteRun(ctx, p+"-gone", nil, Withdrawal{Reason: "gone"}))
}

// seedTwo seeds alice-7f3e and bob-91ad (seedPerson), with the OAuth
// client they share, and an audit record naming alice.
func seedTwo(t *testing.T, s Store) {
	t.Helper()
	ctx := t.Context()
	if _, err := s.CreateOAuthClient(ctx, OAuthClient{ID: "shared-client", Kind: OAuthClientRegistered, Name: "shared",
		RedirectURIs: []string{"https://shared-client.example/cb"}, GrantTypes: []string{"authorization_code", "refresh_token"}, AuthMethod: "none"}); err != nil {
		t.Fatal(err)
	}
	seedPerson(t, s, "alice-7f3e")
	seedPerson(t, s, "bob-91ad")
	if _, err := s.AppendAudit(ctx, func(h AuditHead) (AuditRecord, error) {
		return AuditRecord{Seq: h.Seq + 1, PrevHash: h.Hash, Hash: fmt.Sprintf("%064d", h.Seq+1), At: time.Now().Truncate(time.Microsecond), Kind: "executed", Principal: "alice-7f3e"}, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// rowsNaming returns, for each table of the store's schema, how many of
// its rows hold text with the person's name in any column.
func rowsNaming(t *testing.T, c *core, name string) map[string]int {
	t.Helper()
	ctx := t.Context()
	q := `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`
	if c.lite {
		q = `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`
	}
	tables, err := queryAll(ctx, c.reader(), stmt{pg: q, lite: q}, func(r rowScanner) (string, error) {
		var n string
		return n, r.Scan(&n)
	})
	if err != nil || len(tables) < 30 {
		t.Fatalf("tables: %v, %v", tables, err)
	}
	out := map[string]int{}
	for _, table := range tables {
		out[table] = countNaming(ctx, t, c, table, name)
	}
	return out
}

// countNaming counts the rows of table with name in a column's text.
func countNaming(ctx context.Context, t *testing.T, c *core, table, name string) int {
	t.Helper()
	rows, err := c.read.QueryContext(ctx, `SELECT * FROM `+table)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		for _, v := range vals {
			var text string
			switch v := v.(type) {
			case string:
				text = v
			case []byte:
				text = string(v)
			}
			if strings.Contains(text, name) {
				n++
				break
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return n
}

// TestErasePrincipal: after a person's erasure no row of any table names
// them or holds what they wrote, but the audit log's, which gains the
// erasure's record; another person's rows are all there; a second erasure
// finds nothing. Both engines.
func TestErasePrincipal(t *testing.T) {
	t.Parallel()
	atomicEngines(t, func(t *testing.T, s Store, c *core) {
		ctx := t.Context()
		seedTwo(t, s)
		bobBefore := rowsNaming(t, c, "bob-91ad")
		aliceBefore := rowsNaming(t, c, "alice-7f3e")
		for _, table := range []string{"runs", "run_events", "approvals", "tool_executions", "notes", "attachments", "user_settings", "run_pins", "model_usage", "browser_sessions", "oauth_codes", "oauth_refresh_tokens", "oauth_consents", "mcp_sessions"} {
			if aliceBefore[table] == 0 {
				t.Errorf("the seed left nothing of alice in %s: the test would not see it erased", table)
			}
		}

		var recorded PrincipalErasure
		got, err := s.ErasePrincipal(ctx, "alice-7f3e", func(e PrincipalErasure) (func(AuditHead) (AuditRecord, error), error) {
			recorded = e
			return func(h AuditHead) (AuditRecord, error) {
				return AuditRecord{Seq: h.Seq + 1, PrevHash: h.Hash, Hash: fmt.Sprintf("%064d", h.Seq+1), At: time.Now().Truncate(time.Microsecond), Kind: "principal_erased", Principal: e.Principal}, nil
			}, nil
		})
		want := PrincipalErasure{Principal: "alice-7f3e", Runs: 2, Approvals: 1, Executions: 1, Notes: 1, Attachments: 1, Settings: 1, UsageDays: 1, Sessions: 1, OAuth: 3, MCPSessions: 1}
		if err != nil || got != want || recorded != want {
			t.Fatalf("ErasePrincipal = %+v, %v (recorded %+v); want %+v", got, err, recorded, want)
		}
		for table, n := range rowsNaming(t, c, "alice-7f3e") {
			switch {
			case table == "audit_log":
				if n != aliceBefore[table]+1 {
					t.Errorf("audit records naming alice: %d, want the %d before and the erasure's", n, aliceBefore[table])
				}
			case n != 0:
				t.Errorf("%d rows of %s still name alice after her erasure", n, table)
			}
		}
		if n := countNaming(ctx, t, c, "attachment_contents", "a file of alice"); n != 0 {
			t.Errorf("%d attachment contents of alice's left", n)
		}
		if after := rowsNaming(t, c, "bob-91ad"); fmt.Sprint(after) != fmt.Sprint(bobBefore) {
			t.Errorf("bob's rows by table changed with alice's erasure:\n%v\nwas\n%v", after, bobBefore)
		}
		if again, err := s.ErasePrincipal(ctx, "alice-7f3e", nil); err != nil || again != (PrincipalErasure{Principal: "alice-7f3e"}) {
			t.Errorf("a second erasure = %+v, %v; want nothing erased", again, err)
		}
		if _, err := s.ErasePrincipal(ctx, "", nil); err == nil {
			t.Error("an erasure of no one succeeded")
		}
	})
}

// TestExportPrincipal: a person's export holds, table by table, at least
// every row that names them (the rows of their conversations that do not
// name them come too), the audit log's included, and nothing of another
// person's; it encodes as JSON.
func TestExportPrincipal(t *testing.T) {
	t.Parallel()
	atomicEngines(t, func(t *testing.T, s Store, c *core) {
		ctx := t.Context()
		seedTwo(t, s)
		exported := map[string][]map[string]any{}
		if err := s.ExportPrincipal(ctx, "alice-7f3e", func(table string, row map[string]any) error {
			exported[table] = append(exported[table], row)
			return nil
		}); err != nil {
			t.Fatalf("ExportPrincipal: %v", err)
		}
		b, err := json.Marshal(exported)
		if err != nil {
			t.Fatalf("the export does not encode: %v", err)
		}
		if strings.Contains(string(b), "bob-91ad") {
			t.Error("the export of alice holds something of bob's")
		}
		for table, n := range rowsNaming(t, c, "alice-7f3e") {
			if strings.HasPrefix(table, "run_search") {
				continue // SQLite's search index: the words of the events exported
			}
			if len(exported[table]) < n {
				t.Errorf("%s: %d rows exported, %d name alice", table, len(exported[table]), n)
			}
		}
		if len(exported["run_events"]) < 3 || !strings.Contains(string(b), "the secret plans of alice-7f3e") || !strings.Contains(string(b), "a file of alice-7f3e") {
			t.Errorf("the export lacks alice's messages or her file's content: %d events", len(exported["run_events"]))
		}
		errStop := errors.New("stop")
		if err := s.ExportPrincipal(ctx, "alice-7f3e", func(string, map[string]any) error { return errStop }); !errors.Is(err, errStop) {
			t.Errorf("an export whose row fails = %v, want its error", err)
		}
	})
}

// TestExportKeepsText: an export gives the JSON columns as JSON and every
// other text as the string it is — a note and a text file whose content
// looks like JSON come back byte for byte — and jsonColumns names exactly
// the json and jsonb columns of the tables an export reads (PostgreSQL's
// schema says which).
func TestExportKeepsText(t *testing.T) {
	t.Parallel()
	atomicEngines(t, func(t *testing.T, s Store, c *core) {
		ctx := t.Context()
		const p, body, file = "alice-7f3e", `{"milk": 2,  "eggs": [1]}`, "[1, 2,\n 3]\n"
		if _, err := s.PutNote(ctx, Note{Owner: p, Name: "list", Body: body}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutAttachment(ctx, Attachment{ID: "att-j", Owner: p, Tenant: "t", Name: "n.json", ContentType: "application/json"}, []byte(file), 1<<10); err != nil {
			t.Fatal(err)
		}
		first := NewEvent{Type: "message.user", Payload: json.RawMessage(`{"content":"{\"not\": \"json\"}"}`)}
		if _, _, err := s.OpenRun(ctx, Run{ID: "run-j", Owner: p}, 5, &first); err != nil {
			t.Fatal(err)
		}
		got := map[string]any{}
		if err := s.ExportPrincipal(ctx, p, func(table string, row map[string]any) error {
			switch table {
			case "notes":
				got["note"] = row["body"]
			case "attachment_contents":
				got["file"] = row["data"]
			case "run_events":
				got["payload"] = row["payload"]
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got["note"] != body || got["file"] != file {
			t.Errorf("the note's body and the file's content exported as %#v and %#v; want the strings %q and %q", got["note"], got["file"], body, file)
		}
		if raw, ok := got["payload"].(json.RawMessage); !ok || !json.Valid(raw) {
			t.Errorf("the event's payload exported as %#v, want JSON", got["payload"])
		}
		if c.lite {
			return
		}
		var tables []string
		for _, pt := range principalTables {
			tables = append(tables, pt.table)
		}
		rows, err := c.read.QueryContext(ctx, `SELECT table_name || '.' || column_name FROM information_schema.columns
WHERE table_schema = current_schema() AND data_type IN ('json', 'jsonb') AND table_name = ANY($1)`, tables)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		schema := map[string]bool{}
		for rows.Next() {
			var col string
			if err := rows.Scan(&col); err != nil {
				t.Fatal(err)
			}
			schema[col] = true
		}
		if rows.Err() != nil || !maps.Equal(schema, jsonColumns) {
			t.Errorf("the JSON columns of the exported tables = %v (%v); jsonColumns = %v", schema, rows.Err(), jsonColumns)
		}
	})
}
