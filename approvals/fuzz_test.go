package approvals

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDecodeDecision checks the decision body parser against
// encoding/json: whatever it accepts is one JSON object of exactly the
// members it reports, and it never panics. Plain `go test` runs the seeds
// only; `go test -fuzz FuzzDecodeDecision ./approvals` explores.
func FuzzDecodeDecision(f *testing.F) {
	for _, seed := range []string{
		`{"decision":"approve"}`,
		`{"decision":"deny","reason":"not today"}`,
		`{"reason":"ok","decision":"approve"}`,
		` {"decision" : "approve" , "reason" : "" } ` + "\n",
		`{"decision":"approve","decision":"deny"}`,
		`{"Decision":"approve"}`,
		`{"decisio\u006e":"approve"}`,
		`{"decision":"APPROVE"}`,
		`{"decision":true}`,
		`{"decision":"approve","reason":null}`,
		`{"decision":"approve","reason":["a"]}`,
		`{"decision":"approve","extra":1}`,
		`{"decision":"approve"}{"decision":"deny"}`,
		`{"decision":"approve"} x`,
		`{"decision":"approve"`,
		`["decision","approve"]`,
		`"approve"`,
		``,
		`{}`,
		`{"reason":"\u0000\ud800 é"}`,
		`{"decision":"deny","reason":"` + strings.Repeat("é", 600) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := decodeDecision(bytes.NewReader(body))
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not one JSON value: %q", body)
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("accepted a body that is not a JSON object: %q: %v", body, err)
		}
		for name := range m {
			if name != "decision" && name != "reason" {
				t.Fatalf("accepted a member %q: %q", name, body)
			}
		}
		decision, _ := m["decision"].(string)
		if decision != "approve" && decision != "deny" {
			t.Fatalf("accepted decision %v: %q", m["decision"], body)
		}
		if d.approve != (decision == "approve") {
			t.Fatalf("decoded approve=%v from %q", d.approve, body)
		}
		reason, isString := m["reason"].(string)
		if _, present := m["reason"]; present && !isString {
			t.Fatalf("accepted a reason that is not a string: %q", body)
		}
		if d.reason != reason {
			t.Fatalf("decoded reason %q, encoding/json reads %q: %q", d.reason, reason, body)
		}
	})
}
