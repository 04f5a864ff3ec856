package assistant

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/usherhq/usher/store"
)

// The OpenAPI document is written by hand. These tests hold it to the
// code, reading the handlers' source where the compiler cannot help: a
// route, an error code or a field added without documentation fails here.

// loadOpenAPI decodes the embedded document, refusing repeated member
// names (which encoding/json would take silently, the last one winning).
func loadOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	if err := checkNoDuplicateKeys(json.NewDecoder(bytes.NewReader(openAPIDocument))); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json is not one JSON object: %v", err)
	}
	return doc
}

// checkNoDuplicateKeys reads one JSON value from dec and fails on an object
// that repeats a member name, or on anything after the value.
func checkNoDuplicateKeys(dec *json.Decoder) error {
	var value func(path string) error
	value = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					return err
				}
				key := tok.(string)
				if seen[key] {
					return errors.New(path + ": member " + key + " repeated")
				}
				seen[key] = true
				if err := value(path + "/" + key); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := value(path + "/[]"); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := value("#"); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the document")
	}
	return nil
}

// resolve follows a local JSON pointer ("#/components/schemas/Run").
func resolve(doc map[string]any, ref string) (any, bool) {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, false
	}
	var node any = doc
	for _, part := range strings.Split(rest, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[part]; !ok {
			return nil, false
		}
	}
	return node, true
}

// walk calls fn on every object of node, depth first, with its JSON
// pointer.
func walk(node any, path string, fn func(path string, m map[string]any)) {
	switch v := node.(type) {
	case map[string]any:
		fn(path, v)
		for k, x := range v {
			walk(x, path+"/"+strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"), fn)
		}
	case []any:
		for _, x := range v {
			walk(x, path+"/[]", fn)
		}
	}
}

// deref returns what a {"$ref": …} object points to, or m itself.
func deref(t *testing.T, doc map[string]any, m map[string]any) map[string]any {
	t.Helper()
	ref, ok := m["$ref"].(string)
	if !ok {
		return m
	}
	target, ok := resolve(doc, ref)
	if !ok {
		t.Fatalf("$ref %s does not resolve", ref)
	}
	out, ok := target.(map[string]any)
	if !ok {
		t.Fatalf("$ref %s is not an object", ref)
	}
	return deref(t, doc, out)
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operations returns the document's operations as "METHOD /path".
func operations(doc map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	paths, _ := doc["paths"].(map[string]any)
	for path, item := range paths {
		item, _ := item.(map[string]any)
		for _, m := range httpMethods {
			if op, ok := item[m].(map[string]any); ok {
				out[strings.ToUpper(m)+" "+path] = op
			}
		}
	}
	return out
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	if v, _ := doc["openapi"].(string); !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(v) {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
	info, _ := doc["info"].(map[string]any)
	if info["title"] == nil || info["version"] == nil {
		t.Error("info needs a title and a version")
	}

	// Every $ref, and every discriminator mapping, resolves.
	refs := 0
	walk(doc, "#", func(path string, m map[string]any) {
		if ref, ok := m["$ref"].(string); ok {
			refs++
			if _, ok := resolve(doc, ref); !ok {
				t.Errorf("%s: $ref %s does not resolve", path, ref)
			}
		}
		if d, ok := m["discriminator"].(map[string]any); ok {
			mapping, _ := d["mapping"].(map[string]any)
			for value, ref := range mapping {
				if _, ok := resolve(doc, ref.(string)); !ok {
					t.Errorf("%s: discriminator %s → %s does not resolve", path, value, ref)
				}
			}
		}
	})
	if refs == 0 {
		t.Error("no $ref found: the walk is broken")
	}

	// Operations: unique ids, described responses, declared path
	// parameters.
	ids := map[string]string{}
	param := regexp.MustCompile(`\{([^}]+)\}`)
	paths, _ := doc["paths"].(map[string]any)
	for route, op := range operations(doc) {
		id, _ := op["operationId"].(string)
		if id == "" {
			t.Errorf("%s: no operationId", route)
		} else if other, dup := ids[id]; dup {
			t.Errorf("%s: operationId %s also used by %s", route, id, other)
		}
		ids[id] = route
		responses, _ := op["responses"].(map[string]any)
		if len(responses) == 0 {
			t.Errorf("%s: no responses", route)
		}
		for status, r := range responses {
			if r := deref(t, doc, r.(map[string]any)); r["description"] == nil {
				t.Errorf("%s: response %s has no description", route, status)
			}
		}
		_, path, _ := strings.Cut(route, " ")
		declared := map[string]bool{}
		item := paths[path].(map[string]any)
		var params []any
		if p, ok := item["parameters"].([]any); ok {
			params = append(params, p...)
		}
		if p, ok := op["parameters"].([]any); ok {
			params = append(params, p...)
		}
		for _, p := range params {
			p := deref(t, doc, p.(map[string]any))
			if p["in"] == "path" {
				declared[p["name"].(string)] = true
				if p["required"] != true {
					t.Errorf("%s: path parameter %v must be required", route, p["name"])
				}
			}
		}
		for _, m := range param.FindAllStringSubmatch(path, -1) {
			if !declared[m[1]] {
				t.Errorf("%s: path parameter %s is not declared", route, m[1])
			}
			delete(declared, m[1])
		}
		for name := range declared {
			t.Errorf("%s: path parameter %s is not in the path", route, name)
		}
	}
}

// routePattern finds the routes a ServeMux registers with a method:
// mux.HandleFunc("POST /api/assistant/runs", …) or mux.Handle("GET /api/me", …).
var routePattern = regexp.MustCompile(`mux\.Handle(?:Func)?\("([A-Z]+) (/[^"]*)"`)

// sourceRoutes returns the "METHOD /path" routes registered in file whose
// path starts with prefix.
func sourceRoutes(t *testing.T, file, prefix string) []string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range routePattern.FindAllStringSubmatch(string(src), -1) {
		if strings.HasPrefix(m[2], prefix) {
			out = append(out, m[1]+" "+m[2])
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: found no %s routes: has the registration changed shape?", file, prefix)
	}
	return out
}

func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	ops := operations(doc)
	for _, c := range []struct {
		file, prefix string
		// exact: every documented route under prefix must be registered
		// in file too.
		exact bool
	}{
		{"http.go", "/api/assistant/", true},
		{"../approvals/http.go", "/api/approvals", true},
		{"../review/review.go", "/api/audit", true},
		{"../review/review.go", "/api/policy", true},
		{"../review/review.go", "/api/tools", true},
		{"../status/http.go", "/api/admin", true},
		{"../broker/oauth/apps.go", "/api/oauth/", false},
		{"../cmd/usher/serve.go", "/api/", false},
	} {
		registered := sourceRoutes(t, c.file, c.prefix)
		for _, route := range registered {
			if ops[route] == nil {
				t.Errorf("%s registers %s, which openapi.json does not document", c.file, route)
			}
		}
		if !c.exact {
			continue
		}
		for route := range ops {
			_, path, _ := strings.Cut(route, " ")
			if strings.HasPrefix(path, c.prefix) && !slices.Contains(registered, route) {
				t.Errorf("openapi.json documents %s, which %s does not register", route, c.file)
			}
		}
	}
}

// Where error codes are written in source: httpx.Errorf(status, "code", …),
// the common errors of httpx (Code: "code"), and the identity middleware's
// refusals (writeError(w, status, challenge,\n"code", …)).
var (
	errorfCode   = regexp.MustCompile(`httpx\.Errorf\(\s*[^,()]+,\s*"([^"]+)"`)
	httpxCode    = regexp.MustCompile(`Code:\s*"([^"]+)"`)
	identityCode = regexp.MustCompile(`(?s)writeError\(w, http\.Status\w+,.*?\n\s*"([^"]+)",`)
)

// sourceCodes returns the error codes pattern finds in the Go files (not
// tests) matching glob.
func sourceCodes(t *testing.T, glob string, pattern *regexp.Regexp) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no files (%v)", glob, err)
	}
	out := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range pattern.FindAllStringSubmatch(string(src), -1) {
			out[m[1]] = true
		}
	}
	return out
}

// documentedCodes returns the codes of the error bodies ({"error": {"code":
// …}}) found in node, following $refs.
func documentedCodes(doc map[string]any, node any) map[string]bool {
	out := map[string]bool{}
	seen := map[string]bool{}
	var visit func(node any)
	visit = func(node any) {
		walk(node, "", func(_ string, m map[string]any) {
			if e, ok := m["error"].(map[string]any); ok {
				if code, ok := e["code"].(string); ok {
					out[code] = true
				}
			}
			if ref, ok := m["$ref"].(string); ok && !seen[ref] {
				seen[ref] = true
				if target, ok := resolve(doc, ref); ok {
					visit(target)
				}
			}
		})
	}
	visit(node)
	return out
}

// pathsUnder returns the path items whose path starts with prefix.
func pathsUnder(doc map[string]any, prefix string) []any {
	var out []any
	for path, item := range doc["paths"].(map[string]any) {
		if strings.HasPrefix(path, prefix) {
			out = append(out, item)
		}
	}
	return out
}

func TestOpenAPIErrorCodes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	all := documentedCodes(doc, doc)
	for _, c := range []struct {
		name  string
		codes map[string]bool
		// where the codes must be documented: in the responses of the
		// paths under this prefix ("" for anywhere in the document).
		prefix string
		// a code the pattern must find, lest a changed source shape make
		// the check vacuous.
		known string
	}{
		{"assistant/*.go", sourceCodes(t, "*.go", errorfCode), "/api/assistant/", "too_many_active_runs"},
		{"approvals/*.go", sourceCodes(t, "../approvals/*.go", errorfCode), "/api/approvals", "approval_decided"},
		{"broker/refuse.go", sourceCodes(t, "../broker/refuse.go", errorfCode), "/api/approvals", "broker_token_refused"},
		{"review/*.go", sourceCodes(t, "../review/*.go", errorfCode), "/api/", "reviewer_required"},
		{"status/*.go", sourceCodes(t, "../status/*.go", errorfCode), "/api/admin", "admin_required"},
		{"internal/httpx", sourceCodes(t, "../internal/httpx/error.go", httpxCode), "", "body_too_large"},
		{"internal/identity", sourceCodes(t, "../internal/identity/middleware.go", identityCode), "/api/me", "insufficient_scope"},
	} {
		if !c.codes[c.known] {
			t.Errorf("%s: the source scan did not find %q: has the way errors are written changed?", c.name, c.known)
		}
		documented := all
		if c.prefix != "" {
			documented = documentedCodes(doc, pathsUnder(doc, c.prefix))
		}
		for code := range c.codes {
			if !documented[code] {
				where := "the document"
				if c.prefix != "" {
					where = "the responses of " + c.prefix
				}
				t.Errorf("%s sends error code %q, which %s does not show", c.name, code, where)
			}
		}
	}

	// And the document shows no code that nothing sends.
	sent := map[string]bool{}
	for _, s := range []map[string]bool{
		sourceCodes(t, "*.go", errorfCode),
		sourceCodes(t, "../approvals/*.go", errorfCode),
		sourceCodes(t, "../review/*.go", errorfCode),
		sourceCodes(t, "../status/*.go", errorfCode),
		sourceCodes(t, "../broker/refuse.go", errorfCode),
		sourceCodes(t, "../internal/httpx/error.go", httpxCode),
		sourceCodes(t, "../internal/identity/middleware.go", identityCode),
	} {
		for code := range s {
			sent[code] = true
		}
	}
	for code := range all {
		if !sent[code] {
			t.Errorf("openapi.json shows error code %q, which no handler sends", code)
		}
	}
}

// jsonFields returns the JSON member names of a struct type, and whether
// each is left out when empty (omitempty, omitzero).
func jsonFields(typ reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		optional := false
		for o := range strings.SplitSeq(opts, ",") {
			optional = optional || o == "omitempty" || o == "omitzero"
		}
		out[name] = optional
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	check := func(name string, typ reflect.Type) {
		t.Helper()
		s, ok := schemas[name].(map[string]any)
		if !ok {
			t.Errorf("schema %s is missing", name)
			return
		}
		props, _ := s["properties"].(map[string]any)
		required := map[string]bool{}
		if r, ok := s["required"].([]any); ok {
			for _, n := range r {
				required[n.(string)] = true
			}
		}
		fields := jsonFields(typ)
		if got, want := sortedKeys(props), sortedKeys(fields); !slices.Equal(got, want) {
			t.Errorf("schema %s has properties %v; %s encodes %v", name, got, typ, want)
		}
		for field, optional := range fields {
			if required[field] == optional {
				t.Errorf("schema %s: %s is required=%v, but %s marks it omitempty=%v", name, field, required[field], typ, optional)
			}
		}
	}
	for name, v := range map[string]any{
		"Run":                  RunView{},
		"RunContext":           ContextView{},
		"UserMessage":          UserMessage{},
		"AssistantMessage":     AssistantMessage{},
		"ToolCall":             ToolCall{},
		"ToolResult":           ToolResult{},
		"ApprovalRef":          ApprovalRef{},
		"TurnStart":            TurnStart{},
		"TurnPause":            TurnPause{},
		"TurnEnd":              TurnEnd{},
		"SystemPromptRecord":   SystemPromptRecord{},
		"RuntimeContextRecord": RuntimeContextRecord{},
		"SummaryMessage":       SummaryMessage{},
		"ContextCompacted":     ContextCompacted{},
		"CompactionFailed":     CompactionFailed{},
		"RunContinued":         RunContinued{},
		"ContentPart":          ContentPart{},
		"Me":                   Me{},
		"SearchResult":         SearchResult{},
		"RunLimits":            RunLimits{},
		"RunMetadata":          RunMetadata{},
		"Model":                ModelView{},
		"TokenUsage":           TokenUsage{},
		"Snapshot":             SnapshotView{},
		"BranchList":           BranchesView{},
		"BranchSwitch":         BranchSwitch{},
		"Branch":               BranchView{},
		"LineSegment":          SegmentView{},
		"Fork":                 ForkView{},
		"Alternative":          AlternativeView{},
		"Step":                 StepView{},
		"StepRecord":           store.StepRecord{},
		"RunBudget":            RunBudget{},
	} {
		check(name, reflect.TypeOf(v))
	}

	// Every event type the runtime writes has its variant of Event, each an
	// EventView; the message types also of MessageEvent.
	src, err := os.ReadFile("events.go")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, m := range regexp.MustCompile(`\bEvent\w+\s*=\s*"([^"]+)"`).FindAllStringSubmatch(string(src), -1) {
		types = append(types, m[1])
	}
	if !slices.Contains(types, EventTurnEnd) {
		t.Fatalf("events.go: found event types %v, not %s: has the way they are declared changed?", types, EventTurnEnd)
	}
	for _, union := range []struct {
		name     string
		messages bool
	}{{"Event", false}, {"MessageEvent", true}} {
		s := schemas[union.name].(map[string]any)
		mapping := s["discriminator"].(map[string]any)["mapping"].(map[string]any)
		var want []string
		for _, typ := range types {
			if !union.messages || strings.HasPrefix(typ, "message.") {
				want = append(want, typ)
			}
		}
		sort.Strings(want)
		if got := sortedKeys(mapping); !slices.Equal(got, want) {
			t.Errorf("schema %s maps event types %v; events.go declares %v", union.name, got, want)
		}
		if n := len(s["oneOf"].([]any)); n != len(want) {
			t.Errorf("schema %s has %d variants, want %d", union.name, n, len(want))
		}
		for typ, ref := range mapping {
			variant := deref(t, doc, map[string]any{"$ref": ref})
			name := strings.TrimPrefix(ref.(string), "#/components/schemas/")
			if c := variant["properties"].(map[string]any)["type"].(map[string]any)["const"]; c != typ {
				t.Errorf("schema %s: type is %v, want %s", name, c, typ)
			}
			check(name, reflect.TypeOf(EventView{}))
		}
	}

	// The members of the JSON objects http.go builds as maps are
	// documented in the response schemas.
	handlers, err := os.ReadFile("http.go")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, name := range []string{"RunList", "RunWindow", "MessageQueued", "TurnResult", "MessagePage", "EventPage"} {
		props, _ := schemas[name].(map[string]any)["properties"].(map[string]any)
		for p := range props {
			documented[p] = true
		}
	}
	members := regexp.MustCompile(`(?:"(\w+)":\s|\w+\["(\w+)"\]\s*=)`).FindAllStringSubmatch(string(handlers), -1)
	if len(members) == 0 {
		t.Fatal("http.go: found no map members: has the way responses are built changed?")
	}
	for _, m := range members {
		if name := m[1] + m[2]; !documented[name] {
			t.Errorf("http.go answers with a member %q that no response schema documents", name)
		}
	}
}

func TestOpenAPIHandler(t *testing.T) {
	t.Parallel()
	h := OpenAPIHandler()
	serve := func(method string, header http.Header) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/api/openapi.json", nil)
		for k, v := range header {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	w := serve(http.MethodGet, nil)
	if w.Code != http.StatusOK {
		t.Fatalf("GET: %d %s", w.Code, w.Body)
	}
	for name, want := range map[string]string{
		"Content-Type":           "application/json",
		"Cache-Control":          "no-cache",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := w.Header().Get(name); got != want {
			t.Errorf("GET: %s = %q, want %q", name, got, want)
		}
	}
	if !bytes.Equal(w.Body.Bytes(), openAPIDocument) {
		t.Error("GET: the body is not the document")
	}
	etag := w.Header().Get("ETag")
	if etag == "" {
		t.Fatal("GET: no ETag")
	}

	if w := serve(http.MethodHead, nil); w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Errorf("HEAD: %d with %d bytes, want 200 and none", w.Code, w.Body.Len())
	}
	if w := serve(http.MethodGet, http.Header{"If-None-Match": {etag}}); w.Code != http.StatusNotModified {
		t.Errorf("GET If-None-Match: %d, want 304", w.Code)
	}

	w = serve(http.MethodPost, nil)
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusMethodNotAllowed ||
		body.Error.Code != "method_not_allowed" || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d Allow=%q %s, want 405 method_not_allowed", w.Code, w.Header().Get("Allow"), w.Body)
	}
}
