package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// referenceLine is a record's line as encoding/json writes it: the details
// parsed and written again (canonicalDetails), then the record's fields by
// reflection, keys in the byte order of the struct's fields. Line must
// write the same bytes.
func referenceLine(r store.AuditRecord) ([]byte, error) {
	b, err := bodyOf(r)
	if err != nil {
		return nil, err
	}
	e := struct {
		ApprovalID     string          `json:"approval_id"`
		ArgumentsHash  string          `json:"arguments_hash"`
		At             string          `json:"at"`
		ClientID       string          `json:"client_id"`
		Decision       string          `json:"decision"`
		DefinitionHash string          `json:"definition_hash"`
		Details        json.RawMessage `json:"details"`
		EventID        string          `json:"event_id,omitempty"`
		Hash           string          `json:"hash"`
		Kind           string          `json:"kind"`
		LatencyUS      int64           `json:"latency_us"`
		Outcome        string          `json:"outcome"`
		PolicyHash     string          `json:"policy_hash"`
		PolicyIDs      []string        `json:"policy_ids"`
		PrevHash       string          `json:"prev_hash"`
		Principal      string          `json:"principal"`
		RunID          string          `json:"run_id"`
		Seq            int64           `json:"seq"`
		TokenJTI       string          `json:"token_jti"`
		Tool           string          `json:"tool"`
	}{
		b.ApprovalID, b.ArgumentsHash, b.At, b.ClientID, b.Decision, b.DefinitionHash, b.Details, b.EventID,
		r.Hash, b.Kind, b.LatencyUS, b.Outcome, b.PolicyHash, b.PolicyIDs, r.PrevHash, b.Principal, b.RunID,
		b.Seq, b.TokenJTI, b.Tool,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// lineRecord is a record with a value in every field.
func lineRecord() store.AuditRecord {
	return store.AuditRecord{
		Seq: 7, At: time.Date(2031, 3, 4, 5, 6, 7, 8000, time.FixedZone("CET", 3600)),
		Kind: "mcp_tool_call", Principal: "https://issuer.example|tid|oid", ClientID: "client-1", TokenJTI: "jti-1",
		Tool: "up__echo", DefinitionHash: "sha256:d", ArgumentsHash: "sha256:a", Decision: "allow",
		PolicyIDs: []string{"allow-echo", "p2"}, PolicyHash: "sha256:p", ApprovalID: "apr-1", RunID: "run-1",
		Outcome: "ok", Latency: 1234 * time.Microsecond,
		Details:  json.RawMessage(`{"reasons":["allow-echo"],"server":"up"}`),
		PrevHash: strings.Repeat("ab", 32), Hash: strings.Repeat("cd", 32),
		EventID: "0123456789abcdef0123456789abcdef",
	}
}

// awkwardStrings are texts whose JSON form has escapes of every sort.
var awkwardStrings = []string{
	"", "plain", `quote " backslash \ slash /`, "<html> & </html>", "tab\tnewline\nreturn\rbell\bfeed\f",
	"nul\x00 unit\x1f del\x7f", "é ü 日本 🙂", "line\u2028para\u2029", "bad \xff utf-8 \xc3", "\xed\xa0\x80 surrogate",
}

// Line writes what encoding/json writes for every field, whatever the
// texts hold, and whatever form the details are in.
func TestLineIsEncodingJSONs(t *testing.T) {
	t.Parallel()
	var cases []store.AuditRecord
	for _, s := range awkwardStrings {
		r := lineRecord()
		r.ApprovalID, r.ArgumentsHash, r.ClientID, r.Decision, r.DefinitionHash = s, s, s, s, s
		r.Kind, r.Outcome, r.PolicyHash, r.Principal, r.RunID, r.TokenJTI, r.Tool = s, s, s, s, s, s, s
		r.Hash, r.PrevHash, r.EventID = s, s, s
		r.PolicyIDs = []string{s, s + "2"}
		cases = append(cases, r)
	}
	for _, d := range detailsCases {
		r := lineRecord()
		r.Details = json.RawMessage(d.json)
		cases = append(cases, r)
	}
	other := lineRecord()
	other.PolicyIDs, other.EventID, other.Details, other.Latency = nil, "", nil, 0
	other.At = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	cases = append(cases, other)
	for i, r := range cases {
		want, wantErr := referenceLine(r)
		got, err := Line(r)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Errorf("case %d: Line =\n%s (%v), want\n%s (%v)", i, got, err, want, wantErr)
		}
	}
}

// detailsCases are details in canonical form and not, each with whether
// isCanonicalJSON may take it as it is.
var detailsCases = []struct {
	name      string
	json      string
	canonical bool
}{
	{"empty object", `{}`, true},
	{"sorted keys", `{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, true},
	{"numbers as written", `{"a":1.50,"b":-0,"c":1E+5,"d":12345678901234567890}`, true},
	{"array", `[1,"x",{}]`, true},
	{"string", `"x"`, true},
	{"null", `null`, true},
	{"escapes as written", `{"a":"q\" b\\ \b\f\n\r\t \u0000\u001f \u2028\u2029"}`, true},
	{"non-ASCII as itself", `{"a":"é 日本 🙂 <&>"}`, true},
	{"key sorted by bytes", `{"B":1,"a":2,"é":3}`, true},
	{"nothing", ``, false},
	{"space after colon", `{"a": 1}`, false},
	{"space around", ` {"a":1}`, false},
	{"trailing newline", "{\"a\":1}\n", false},
	{"keys out of order", `{"b":1,"a":2}`, false},
	{"nested keys out of order", `{"a":{"d":1,"c":2}}`, false},
	{"repeated key", `{"a":1,"a":2}`, false},
	{"escaped slash", `{"a":"\/"}`, false},
	{"escaped letter", `{"a":"\u0041"}`, false},
	{"uppercase hex", `{"a":"\u001F"}`, false},
	{"escaped newline in long form", `{"a":"\u000a"}`, false},
	{"escaped non-ASCII", `{"a":"\u00e9"}`, false},
	{"surrogate pair", `{"a":"\ud83d\ude42"}`, false},
	{"lone surrogate", `{"a":"\ud800"}`, false},
	{"raw line separator", "{\"a\":\"x\u2028\"}", false},
	{"invalid UTF-8", "{\"a\":\"\xff\"}", false},
	{"escape in a key", `{"a\"":1}`, false},
	{"two values", `{} {}`, false},
	{"two values without space", `{}{}`, false},
	{"after the value", `{"a":1}x`, false},
	{"leading zero", `{"a":01}`, false},
	{"point without digits", `{"a":1.}`, false},
	{"exponent without digits", `{"a":1e}`, false},
	{"minus alone", `{"a":-}`, false},
	{"plus sign", `{"a":+1}`, false},
	{"point first", `{"a":.5}`, false},
	{"literal cut short", `{"a":tru}`, false},
	{"trailing comma", `{"a":1,}`, false},
	{"trailing comma in array", `[1,]`, false},
	{"missing colon", `{"a"1}`, false},
	{"key not a string", `{a:1}`, false},
	{"nested 100 deep", strings.Repeat("[", 100) + strings.Repeat("]", 100), true},
	{"nested 101 deep", strings.Repeat("[", 101) + strings.Repeat("]", 101), false},
	{"raw control character", "{\"a\":\"\x01\"}", false},
	{"not JSON", `{"a":}`, false},
	{"cut short", `{"a":"b`, false},
}

// isCanonicalJSON takes as they are exactly the canonical details it may:
// each it takes is what canonicalDetails writes of it.
func TestIsCanonicalJSON(t *testing.T) {
	t.Parallel()
	for _, c := range detailsCases {
		got := isCanonicalJSON([]byte(c.json))
		if got != c.canonical {
			t.Errorf("%s: isCanonicalJSON(%q) = %v, want %v", c.name, c.json, got, c.canonical)
		}
		if got {
			if again, err := canonicalDetails(json.RawMessage(c.json)); err != nil || string(again) != c.json {
				t.Errorf("%s: canonicalDetails(%q) = %s, %v: not the same", c.name, c.json, again, err)
			}
		}
	}
}

// A record whose details are not JSON has no line.
func TestLineRefusesDetailsThatAreNotJSON(t *testing.T) {
	t.Parallel()
	r := lineRecord()
	r.Details = json.RawMessage(`{"a":`)
	if line, err := Line(r); err == nil {
		t.Errorf("Line = %s, nil error; want an error", line)
	}
	dst := []byte("kept")
	if got, err := AppendRecord(dst, r); err == nil || string(got) != "kept" {
		t.Errorf("AppendRecord = %q, %v; want %q and an error", got, err, "kept")
	}
}

// Whatever the details and texts, Line writes what encoding/json writes,
// and details isCanonicalJSON takes as they are come out of
// canonicalDetails unchanged.
func FuzzLine(f *testing.F) {
	for _, c := range detailsCases {
		f.Add(c.json, "")
	}
	for _, s := range awkwardStrings {
		f.Add(`{"a":"b"}`, s)
	}
	f.Fuzz(func(t *testing.T, details, text string) {
		if isCanonicalJSON([]byte(details)) {
			if again, err := canonicalDetails(json.RawMessage(details)); err != nil || string(again) != details {
				t.Fatalf("isCanonicalJSON(%q), but canonicalDetails = %s, %v", details, again, err)
			}
		}
		r := lineRecord()
		r.Details, r.Principal, r.Tool, r.PolicyIDs = json.RawMessage(details), text, text, []string{text}
		want, wantErr := referenceLine(r)
		got, err := Line(r)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("Line = %s (%v), want %s (%v)", got, err, want, wantErr)
		}
	})
}

// BenchmarkLine writes the line of a record as the MCP server's calls
// make them.
func BenchmarkLine(b *testing.B) {
	r := lineRecord()
	r.Details = json.RawMessage(`{"idempotency_key":"[\"client\",\"user:alice\",\"client-1\",\"8c1d2f6e-4b1a-4e0c-9a3b-2f6d1c0e9b8a\"]","reasons":["allow-echo"],"server":"up"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Line(r); err != nil {
			b.Fatal(err)
		}
	}
}

// appendString writes what encoding/json writes whatever byte sits
// wherever in a text: inside, at the edges and across the eight-byte
// words it skips whole.
func TestAppendStringEveryByteEverywhere(t *testing.T) {
	t.Parallel()
	plain := "0123456789abcdefghijklmnopqrstu" // 31 bytes: words and a tail
	for c := range 256 {
		for at := range len(plain) {
			s := plain[:at] + string([]byte{byte(c)}) + plain[at+1:]
			want := jsonString(s)
			if got := appendString(nil, s); !bytes.Equal(got, want) {
				t.Fatalf("byte %#x at %d: appendString = %s, encoding/json %s", c, at, got, want)
			}
		}
	}
	for _, s := range awkwardStrings {
		s = strings.Repeat(s, 3) + plain + s
		want := jsonString(s)
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendString(%q) = %s, encoding/json %s", s, got, want)
		}
	}
}

// jsonString is s as encoding/json writes it with HTML escaping off.
func jsonString(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// appendTime writes what AppendFormat writes with the layout, in UTC,
// for every year it may hold and the edges of each field.
func TestAppendTimeIsAppendFormats(t *testing.T) {
	t.Parallel()
	cet := time.FixedZone("CET", 3600)
	times := []time.Time{
		{}, time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2031, 1, 1, 0, 0, 0, 1000, cet), time.Date(2031, 3, 4, 5, 6, 7, 8999, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2000, 2, 29, 12, 30, 45, 123456789, cet),
	}
	for y := 1; y < 10000; y += 37 {
		times = append(times, time.Date(y, time.Month(y%12+1), y%28+1, y%24, y%60, (y*7)%60, y*1013, time.UTC))
	}
	for _, tm := range times {
		want := tm.UTC().AppendFormat(nil, timeLayout)
		if got := appendTime(nil, tm); !bytes.Equal(got, want) {
			t.Errorf("appendTime(%v) = %s, AppendFormat %s", tm, got, want)
		}
	}
}
