package mcpserver

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestApprovalRequestRevokesOtherDefinitions shows that asking for an
// approval of a tool revokes the open approvals bound to an older
// definition of it.
func TestApprovalRequestRevokesOtherDefinitions(t *testing.T) {
	t.Parallel()
	st, a := serviceApprovals(t)
	b := store.ApprovalBinding{Principal: "iss|t|alice", Tool: "up__greet", Server: "up", DefinitionHash: "sha256:" + strings.Repeat("1", 64),
		ArgumentsHash: strings.Repeat("a", 64), PolicyHash: strings.Repeat("b", 64), ClientID: "c"}
	old, err := a.Request(t.Context(), ApprovalRequest{Binding: b, Arguments: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	b.DefinitionHash = "sha256:" + strings.Repeat("2", 64)
	if _, err := a.Request(t.Context(), ApprovalRequest{Binding: b, Arguments: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetApproval(t.Context(), old.ID)
	if err != nil || got.Status != store.ApprovalRevoked {
		t.Fatalf("old approval = %v %v, want revoked", got.Status, err)
	}
}

// TestResourceApprovalThroughTheService shows that the approval of a
// resource read, bound to its name qualified by the action, goes through
// the approvals service as a tool call's does: requested pending, then,
// once approved, consumed once without an execution, its record naming
// the action.
func TestResourceApprovalThroughTheService(t *testing.T) {
	t.Parallel()
	st, a := serviceApprovals(t)
	b := store.ApprovalBinding{Principal: "iss|t|alice", Tool: "read_resource:docs__file:///guide.md", Server: "docs",
		DefinitionHash: "sha256:" + strings.Repeat("1", 64), ArgumentsHash: strings.Repeat("a", 64), PolicyHash: strings.Repeat("b", 64), ClientID: "c"}
	req, err := a.Request(t.Context(), ApprovalRequest{Binding: b, Arguments: json.RawMessage(`{}`)})
	if err != nil || req.Status != store.ApprovalPending {
		t.Fatalf("request = %+v, %v", req, err)
	}
	ev := Event{Kind: KindApprovalConsumed, At: time.Now(), Principal: b.Principal, ClientID: "c",
		Action: ActionReadResource, Tool: "docs__file:///guide.md", Server: "docs"}
	if _, _, _, err := a.Consume(t.Context(), b, nil, ev); !errors.Is(err, ErrNotApproved) {
		t.Fatalf("consume before the decision: %v", err)
	}
	if _, err := st.DecideApprovalAudited(t.Context(), store.DecideApprovalParams{ID: req.ID, To: store.ApprovalApproved, DecidedBy: b.Principal, Now: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	used, _, _, err := a.Consume(t.Context(), b, nil, ev)
	if err != nil || used.ID != req.ID {
		t.Fatalf("consume = %+v, %v", used, err)
	}
	if _, _, _, err := a.Consume(t.Context(), b, nil, ev); !errors.Is(err, ErrNotApproved) {
		t.Errorf("a second consume: %v", err)
	}
	ev.EventID = audit.NewEventID()
	entry, err := ev.Entry()
	if err != nil || !strings.Contains(string(entry.Details), `"action":"read_resource"`) {
		t.Errorf("the audit entry's details = %s, %v", entry.Details, err)
	}
	// The event's id is the entry's, which its retries share.
	if entry.EventID != ev.EventID {
		t.Errorf("the audit entry's event id = %q, want the event's %q", entry.EventID, ev.EventID)
	}
}

// serviceApprovals returns a store of the test's own and the Approvals of
// an approvals service on it.
func serviceApprovals(t *testing.T) (store.Store, ServiceApprovals) {
	t.Helper()
	st := storetest.NewSQLite(t)
	svc, err := approvals.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st, ServiceApprovals{Service: svc}
}

// TestEventDetails checks the details of an event's record: its keys
// sorted, the action and the count of suppressed failures only when there
// are some, no reasons as null.
func TestEventDetails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ev   Event
		want string
	}{
		{"tool call", Event{Server: "up", Reasons: []string{"allow-echo"}, IdempotencyKey: "k"},
			`{"idempotency_key":"k","reasons":["allow-echo"],"server":"up"}`},
		{"no reasons", Event{}, `{"idempotency_key":"","reasons":null,"server":""}`},
		{"an action", Event{Action: ActionReadResource, Server: "docs", Reasons: []string{}},
			`{"action":"read_resource","idempotency_key":"","reasons":[],"server":"docs"}`},
		{"suppressed", Event{Suppressed: 3}, `{"idempotency_key":"","reasons":null,"server":"","suppressed":3}`},
		{"none suppressed", Event{Suppressed: -1}, `{"idempotency_key":"","reasons":null,"server":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := tc.ev.Entry()
			if err != nil || string(e.Details) != tc.want {
				t.Errorf("Entry().Details = %s, %v; want %s", e.Details, err, tc.want)
			}
		})
	}
}
