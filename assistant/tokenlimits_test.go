package assistant

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

func TestTokenLimitsFor(t *testing.T) {
	t.Parallel()
	l := TokenLimits{Daily: 1000, Groups: map[string]int64{"research": 50000, "interns": 200, "ops": 0, "": 7}}
	for _, c := range []struct {
		groups, roles []string
		want          int64
	}{
		{nil, nil, 1000},
		{[]string{"sales"}, nil, 1000},
		{[]string{"interns"}, nil, 200},               // a group's limit replaces the default, also when lower
		{[]string{"interns", "research"}, nil, 50000}, // the largest of a person's
		{[]string{"research"}, []string{"ops"}, 0},    // an app role counts; 0 is none, above all
		{[]string{""}, nil, 1000},                     // an empty group names no one
		{[]string{"Research"}, nil, 1000},             // names as the token writes them
		{nil, []string{"interns", "nobody"}, 200},
	} {
		if got := l.For(c.groups, c.roles); got != c.want {
			t.Errorf("For(%q, %q) = %d, want %d", c.groups, c.roles, got, c.want)
		}
	}
	if got := (TokenLimits{}).For([]string{"research"}, nil); got != 0 {
		t.Errorf("no limits: For = %d, want 0", got)
	}
}

// TestLimitWords: the numbers and times the refusals write.
func TestLimitWords(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 500000: "500,000", 1234567: "1,234,567", 10000000000: "10,000,000,000"} {
		if got := digits(n); got != want {
			t.Errorf("digits(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{time.Second: "1 min", 59 * time.Minute: "59 min", time.Hour: "1 h",
		3*time.Hour + 11*time.Minute + time.Second: "3 h 12 min", 24 * time.Hour: "24 h", 0: "1 min"} {
		if got := untilReset(d); got != want {
			t.Errorf("untilReset(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestDailyTokenLimit: on both engines, a person's turn that reaches the
// day's limit stops before its next step (one model request made, its
// tool call run, no second), their next message is refused 429 with
// Retry-After until the day's end, and GET /usage tells them; the same
// person sending as a member of a group without a limit is answered.
// The refusals are counted.
func TestDailyTokenLimit(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms, provider := scriptedModel(t)
		limits := TokenLimits{Daily: 10, Groups: map[string]int64{"unlimited": 0}}
		h := newHarness(t, st, provider, &Options{TokenLimits: limits})

		code, u := h.call(t, "GET", "/usage", "")
		today := store.UsageDay(time.Now())
		if code != http.StatusOK || u["day"] != today || u["tokens"] != float64(0) || u["dailyLimit"] != float64(10) {
			t.Fatalf("GET /usage before any request: %d %v", code, u)
		}

		// The first step is asked (nothing used yet), and uses more than
		// the limit; its tool call runs; the second step is not asked.
		ms.ReplyToolCalls(model.ToolCall{ID: "call-1", Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)})
		ms.Reply("not asked")
		code, out := h.call(t, "POST", "/runs", `{"message": "`+strings.Repeat("many words ", 10)+`"}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /runs = %d %v", code, out)
		}
		runID := out["runId"].(string)
		waitHandled(t, st, runID, 1, 20*time.Second)
		ends := turnEnds(t, st, runID)
		if len(ends) != 1 || ends[0].Status != TurnFailed || ends[0].Error != "You have used today's 10 model tokens, your daily limit. More are available at 00:00 UTC." {
			t.Fatalf("turn ends = %+v; want one, failed at the limit", ends)
		}
		if n := len(ms.Requests()); n != 1 {
			t.Errorf("%d model requests, want 1: the limit is checked before each step", n)
		}
		if msgs := messageTypes(t, st, runID); strings.Join(msgs, " ") != "message.user message.assistant message.tool" {
			t.Errorf("messages = %v; want the step's call and its result kept", msgs)
		}

		code, u = h.call(t, "GET", "/usage", "")
		if code != http.StatusOK || u["tokens"].(float64) < 10 || u["dailyLimit"] != float64(10) {
			t.Errorf("GET /usage after the turn: %d %v; want at least the limit used", code, u)
		}
		resets, err := time.Parse(time.RFC3339, u["resetsAt"].(string))
		if next := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour); err != nil || !resets.Equal(next) {
			t.Errorf("resetsAt = %v (%v), want %v", u["resetsAt"], err, next)
		}

		// Every write that would ask the model is refused; nothing is
		// stored.
		for _, w := range []struct{ method, path, body string }{
			{"POST", "/runs/" + runID + "/messages", `{"content": "and now?"}`},
			{"POST", "/runs", `{"message": "a new one"}`},
			{"POST", "/runs/" + runID + "/regenerate", ``},
			{"POST", "/runs/" + runID + "/messages/1/edit", `{"content": "edited"}`},
			{"POST", "/runs/" + runID + "/compact", ``},
		} {
			req, err := http.NewRequest(w.method, h.api+w.path, strings.NewReader(w.body))
			if err != nil {
				t.Fatal(err)
			}
			if w.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Error struct{ Code, Message string }
			}
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			if resp.StatusCode != http.StatusTooManyRequests || body.Error.Code != "token_limit_reached" ||
				!strings.Contains(body.Error.Message, "More are available at 00:00 UTC, in ") || after < 1 || after > 86400 {
				t.Errorf("%s %s = %d %+v, Retry-After %q; want 429 token_limit_reached until the day's end", w.method, w.path, resp.StatusCode, body.Error, resp.Header.Get("Retry-After"))
			}
		}
		if runs, err := st.ListRuns(t.Context(), testOwner.ID()); err != nil || len(runs) != 1 {
			t.Errorf("runs after the refusals: %d, %v; want only the first", len(runs), err)
		}
		if msgs := messageTypes(t, st, runID); len(msgs) != 3 {
			t.Errorf("messages after the refusals = %v; want none added", msgs)
		}

		// The same person as a member of a group without a limit: sent,
		// and the turn, which reads the groups the message was sent
		// with, is answered.
		api := signedInAs(t, h.rt, identity.Principal{Issuer: testOwner.Issuer, Tenant: testOwner.Tenant, ObjectID: testOwner.ObjectID, Roles: []string{"unlimited"}})
		ms.Forget()
		ms.Reply("answered")
		code, out = apitest.Call(t, "POST", api+"/runs/"+runID+"/messages", "", `{"content": "and now?"}`, "Content-Type", "application/json")
		if code != http.StatusAccepted {
			t.Fatalf("POST as a member of the group without a limit: %d %v", code, out)
		}
		waitHandled(t, st, runID, int64(out["seq"].(float64)), 20*time.Second)
		if ends := turnEnds(t, st, runID); len(ends) != 2 || ends[1].Status != TurnCompleted {
			t.Errorf("turn ends = %+v; want the second completed", ends)
		}
		if code, u := apitest.Call(t, "GET", api+"/usage", "", ""); code != http.StatusOK || u["dailyLimit"] != float64(0) {
			t.Errorf("GET /usage as a member of the group without a limit: %d %v; want dailyLimit 0", code, u)
		}
		if got := [2]int64{h.rt.tokenLimited[limitedRequest].Load(), h.rt.tokenLimited[limitedTurn].Load()}; got != [2]int64{5, 1} {
			t.Errorf("refusals counted (request, turn) = %v, want [5 1]", got)
		}
	})
}

// TestTokenLimitAnswersRetries: past the limit, a write whose
// Idempotency-Key stored it before the limit was reached is answered with
// what it stored (a retry whose first answer was lost), while the same
// write with a new key is refused.
func TestTokenLimitAnswersRetries(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		ms, provider := scriptedModel(t)
		h := newHarness(t, st, provider, &Options{TokenLimits: TokenLimits{Daily: 10, Groups: map[string]int64{"unlimited": 0}}})
		// The same person, first as a member of a group without a limit:
		// the writes are stored and answered, and use the day's tokens.
		free := signedInAs(t, h.rt, identity.Principal{Issuer: testOwner.Issuer, Tenant: testOwner.Tenant, ObjectID: testOwner.ObjectID, Roles: []string{"unlimited"}})
		long := `"` + strings.Repeat("many words ", 10) + `"`
		type write struct{ name, path, body, key string }
		var writes []write
		first := map[string]map[string]any{}
		send := func(w write) {
			ms.Reply(strings.Repeat("an answer of many words ", 3))
			code, out := apitest.Call(t, "POST", free+w.path, "", w.body, "Content-Type", "application/json", "Idempotency-Key", w.key)
			if code/100 != 2 {
				t.Fatalf("%s as a member of the group without a limit: %d %v", w.name, code, out)
			}
			first[w.name] = out
			writes = append(writes, w)
		}
		send(write{"open", "/runs", `{"message": ` + long + `}`, "open-1"})
		runID := first["open"]["runId"].(string)
		waitHandled(t, st, runID, 1, 20*time.Second)
		steps := []write{
			{"post", "/runs/" + runID + "/messages", `{"content": ` + long + `}`, "post-1"},
			{"edit", "/runs/" + runID + "/messages/1/edit", `{"content": ` + long + `}`, "edit-1"},
			{"regenerate", "/runs/" + runID + "/regenerate", ``, "regenerate-1"},
		}
		for _, w := range steps {
			send(w)
			waitHandled(t, st, runID, int64(first[w.name]["seq"].(float64)), 20*time.Second)
		}
		send(write{"compact", "/runs/" + runID + "/compact", ``, "compact-1"})
		if code, u := h.call(t, "GET", "/usage", ""); code != http.StatusOK || u["tokens"].(float64) < 10 {
			t.Fatalf("GET /usage after the writes: %d %v; want the limit used", code, u)
		}
		runs, _ := st.ListRuns(t.Context(), testOwner.ID())
		before := messageTypes(t, st, runID)

		// Then without the group: each retry is answered as the first
		// attempt was, a new key refused.
		for _, w := range writes {
			code, out := h.call(t, "POST", w.path, w.body, "Idempotency-Key", w.key)
			if code/100 != 2 || out["runId"] != first[w.name]["runId"] || out["seq"] != first[w.name]["seq"] || out["id"] != first[w.name]["id"] {
				t.Errorf("%s retried at the limit = %d %v; want the first answer's %v", w.name, code, out, first[w.name])
			}
			if code, out := h.call(t, "POST", w.path, w.body, "Idempotency-Key", w.key+"-new"); code != http.StatusTooManyRequests {
				t.Errorf("%s with a new key at the limit = %d %v, want 429", w.name, code, out)
			}
		}
		if after, _ := st.ListRuns(t.Context(), testOwner.ID()); len(after) != len(runs) {
			t.Errorf("%d runs after the retries, %d before", len(after), len(runs))
		}
		if after := messageTypes(t, st, runID); len(after) != len(before) {
			t.Errorf("messages after the retries = %v, before %v", after, before)
		}
		if n := h.rt.tokenLimited[limitedRequest].Load(); n != int64(len(writes)) {
			t.Errorf("%d refusals counted, want %d (the new keys only)", n, len(writes))
		}
	})
}

// TestNoTokenLimitReadsNothing: without a limit the runtime reads no
// usage before a request or a step (a store that fails the read changes
// nothing), and GET /usage says none.
func TestNoTokenLimitReadsNothing(t *testing.T) {
	t.Parallel()
	st := &usageReadFailingStore{Store: storetest.NewSQLite(t)}
	h := newHarness(t, st, model.NewDemo(), nil)
	code, out := h.call(t, "POST", "/runs", `{"message": "hello"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /runs = %d %v", code, out)
	}
	waitHandled(t, st, out["runId"].(string), 1, 20*time.Second)
	if ends := turnEnds(t, st, out["runId"].(string)); len(ends) != 1 || ends[0].Status != TurnCompleted {
		t.Fatalf("turn ends = %+v, want one completed", ends)
	}
	if code, out := h.call(t, "GET", "/usage", ""); code != http.StatusInternalServerError {
		t.Errorf("GET /usage on a failing read = %d %v, want 500", code, out)
	}
}

// usageReadFailingStore is a real store whose ModelTokensOn fails.
type usageReadFailingStore struct{ store.Store }

func (usageReadFailingStore) ModelTokensOn(context.Context, string, string) (int64, error) {
	return 0, errInjected
}

// messageTypes lists the types of the run's messages, in order.
func messageTypes(t *testing.T, st store.Store, runID string) []string {
	t.Helper()
	msgs, err := st.ListMessages(t.Context(), runID, store.MessageQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, m := range msgs {
		types = append(types, m.Type)
	}
	return types
}

// signedInAs serves rt's API on loopback to requests signed in as p.
func signedInAs(t *testing.T, rt *Runtime, p identity.Principal) string {
	t.Helper()
	h := rt.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), p)))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/api/assistant"
}
