package approvals_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

func TestRequestCreatesOrFinds(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		a := e.request(t, binding())
		if a.Status != store.ApprovalPending || a.ID == "" {
			t.Fatalf("Request = %+v, want a pending approval", a)
		}
		if want := e.clock.Now().Add(approvals.DefaultTTL); !a.ExpiresAt.Equal(want) {
			t.Errorf("ExpiresAt = %v, want %v (the default TTL)", a.ExpiresAt, want)
		}
		again := e.request(t, binding())
		if again.ID != a.ID {
			t.Errorf("the identical call made request %s, want the pending %s", again.ID, a.ID)
		}
		other := binding()
		other.ArgumentsHash = "args-2"
		if b := e.request(t, other); b.ID == a.ID {
			t.Error("a call with other arguments found the first request")
		}
		// Requests are audited once each, however often they are found.
		if got := e.auditKinds(t); !slices.Equal(got, []string{"approval_requested", "approval_requested"}) {
			t.Errorf("audit log = %v, want two approval_requested", got)
		}
		if got, want := e.svc.URL(a.ID), "https://usher.example.com/approvals/"+a.ID; got != want {
			t.Errorf("URL = %s, want %s", got, want)
		}
	})
}

func TestRequestInvalid(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		tests := []struct {
			name      string
			change    func(b *approvals.Binding)
			args      string
			approvers []string
		}{
			{"no principal", func(b *approvals.Binding) { b.Principal = "" }, `{}`, nil},
			{"no tool", func(b *approvals.Binding) { b.Tool = "" }, `{}`, nil},
			{"no definition hash", func(b *approvals.Binding) { b.DefinitionHash = "" }, `{}`, nil},
			{"no arguments hash", func(b *approvals.Binding) { b.ArgumentsHash = "" }, `{}`, nil},
			{"no policy hash", func(b *approvals.Binding) { b.PolicyHash = "" }, `{}`, nil},
			{"no client", func(b *approvals.Binding) { b.ClientID = "" }, `{}`, nil},
			{"arguments not JSON", func(*approvals.Binding) {}, `{"name":`, nil},
			{"an empty approver group", func(*approvals.Binding) {}, `{}`, []string{"grp-reviewers", " "}},
			{"NUL in the server", func(b *approvals.Binding) { b.Server = "a\x00" }, `{}`, nil},
		}
		for _, tt := range tests {
			b := binding()
			tt.change(&b)
			if _, err := e.svc.Request(t.Context(), approvals.Request{Binding: b, Tenant: alice.Tenant, Arguments: []byte(tt.args), Approvers: tt.approvers}); !errors.Is(err, approvals.ErrInvalid) {
				t.Errorf("Request with %s = %v, want ErrInvalid", tt.name, err)
			}
		}
		if got := e.auditKinds(t); len(got) != 0 {
			t.Errorf("refused requests were audited: %v", got)
		}
	})
}

// An approval is used once, by exactly the call it was granted for.
func TestConsumeReplay(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		a := e.approved(t, binding())
		refused := []struct {
			name   string
			change func(b *approvals.Binding)
		}{
			{"changed arguments", func(b *approvals.Binding) { b.ArgumentsHash = "args-2" }},
			{"other user", func(b *approvals.Binding) { b.Principal = carol.ID() }},
			{"other client", func(b *approvals.Binding) { b.ClientID = "cursor" }},
			{"other tool", func(b *approvals.Binding) { b.Tool = "notes_delete" }},
			{"other server", func(b *approvals.Binding) { b.Server = "other" }},
			{"changed definition", func(b *approvals.Binding) { b.DefinitionHash = "def-2" }},
			{"changed policy", func(b *approvals.Binding) { b.PolicyHash = "policy-2" }},
			{"other run", func(b *approvals.Binding) { b.RunID = "run-2" }},
			{"outside the run", func(b *approvals.Binding) { b.RunID = "" }},
		}
		for _, tt := range refused {
			b := binding()
			tt.change(&b)
			if _, err := e.consume(t, b); !errors.Is(err, approvals.ErrNotApproved) {
				t.Errorf("Consume with %s = %v, want ErrNotApproved", tt.name, err)
			}
		}

		used, err := e.consume(t, binding())
		if err != nil || used.ID != a.ID || used.Status != store.ApprovalConsumed {
			t.Fatalf("Consume of the approved call = %+v, %v; want %s consumed", used, err, a.ID)
		}
		if _, err := e.consume(t, binding()); !errors.Is(err, approvals.ErrNotApproved) {
			t.Errorf("second Consume = %v, want ErrNotApproved", err)
		}

		// After expiry, even before any sweep.
		b := binding()
		b.ArgumentsHash = "args-late"
		e.approved(t, b)
		e.clock.Advance(approvals.DefaultTTL)
		if _, err := e.consume(t, b); !errors.Is(err, approvals.ErrNotApproved) {
			t.Errorf("Consume after expiry = %v, want ErrNotApproved", err)
		}
	})
}

func TestConsumeOnlyApproved(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		pending := e.request(t, binding())
		if _, err := e.consume(t, binding()); !errors.Is(err, approvals.ErrNotApproved) {
			t.Errorf("Consume of a pending request = %v, want ErrNotApproved", err)
		}
		if _, err := e.svc.Decide(t.Context(), pending.ID, alice, false, "no"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.consume(t, binding()); !errors.Is(err, approvals.ErrNotApproved) {
			t.Errorf("Consume of a denied request = %v, want ErrNotApproved", err)
		}
		if _, err := e.consume(t, approvals.Binding{}); !errors.Is(err, approvals.ErrInvalid) {
			t.Errorf("Consume of an empty binding = %v, want ErrInvalid", err)
		}
	})
}

func TestConsumeConcurrent(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		e.approved(t, binding())
		const callers = 8
		start := make(chan struct{})
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				<-start
				_, errs[i] = e.consume(t, binding())
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, approvals.ErrNotApproved):
				t.Errorf("caller %d: %v, want nil or ErrNotApproved", i, err)
			}
		}
		if won != 1 {
			t.Errorf("%d concurrent calls consumed one approval, want exactly 1", won)
		}
	})
}

// Who may decide what, named case by case; see the package documentation.
func TestDecideAuthorization(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		tests := []struct {
			name      string
			approvers []string
			decider   identity.Principal
			approve   bool
			want      error
		}{
			{"requester approves, no approvers", nil, alice, true, nil},
			{"requester denies, no approvers", nil, alice, false, nil},
			{"stranger approves, no approvers", nil, carol, true, approvals.ErrNotFound},
			{"reviewer approves, no approvers", nil, bob, true, approvals.ErrNotFound},
			{"group member approves", []string{"grp-reviewers"}, bob, true, nil},
			{"group member denies", []string{"grp-reviewers"}, bob, false, nil},
			{"member of a second group approves", []string{"grp-other-team", "grp-admins"}, dave, true, nil},
			{"app role holder approves", []string{"Usher.Admin"}, rose, true, nil},
			{"app role holder denies", []string{"Usher.Admin"}, rose, false, nil},
			{"group member approves, an app role named", []string{"Usher.Admin"}, bob, true, approvals.ErrNotFound},
			{"requester holding the app role approves her own", []string{"Usher.Admin"}, withRoles(alice, "Usher.Admin"), true, approvals.ErrForbidden},
			{"app role holder in another tenant approves", []string{"Usher.Admin"}, withRoles(identity.Principal{Issuer: alice.Issuer, Tenant: "tenant-2", ObjectID: "rose"}, "Usher.Admin"), true, approvals.ErrNotFound},
			{"requester approves, approvers named", []string{"grp-reviewers"}, alice, true, approvals.ErrForbidden},
			{"requester in the group approves her own", []string{"grp-reviewers"}, aliceReviewer, true, approvals.ErrForbidden},
			{"requester withdraws, approvers named", []string{"grp-reviewers"}, alice, false, nil},
			{"member of another group approves", []string{"grp-reviewers"}, mallory, true, approvals.ErrNotFound},
			{"stranger approves, approvers named", []string{"grp-reviewers"}, carol, true, approvals.ErrNotFound},
			{"nobody approves", nil, person(""), true, approvals.ErrNotFound},
		}
		for i, tt := range tests {
			b := binding()
			b.ArgumentsHash = "args-" + string(rune('a'+i))
			a := e.request(t, b, tt.approvers...)
			got, err := e.svc.Decide(t.Context(), a.ID, tt.decider, tt.approve, "because")
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("%s: Decide = %v, want %v", tt.name, err, tt.want)
				continue
			}
			if tt.want != nil {
				if stored, _ := e.st.GetApproval(t.Context(), a.ID); stored.Status != store.ApprovalPending {
					t.Errorf("%s: a refused decision left the approval %s", tt.name, stored.Status)
				}
				continue
			}
			wantStatus := store.ApprovalDenied
			if tt.approve {
				wantStatus = store.ApprovalApproved
			}
			if got.Status != wantStatus || got.DecidedBy != tt.decider.ID() || got.DecisionReason != "because" {
				t.Errorf("%s: Decide = %+v, want %s by the decider", tt.name, got, wantStatus)
			}
		}
	})
}

func TestDecideIsFinal(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		a := e.approved(t, binding())
		for _, approve := range []bool{true, false} {
			if _, err := e.svc.Decide(t.Context(), a.ID, alice, approve, ""); !errors.Is(err, approvals.ErrDecided) {
				t.Errorf("Decide(%v) of a decided approval = %v, want ErrDecided", approve, err)
			}
		}
		if _, err := e.svc.Decide(t.Context(), "missing", alice, true, ""); !errors.Is(err, approvals.ErrNotFound) {
			t.Errorf("Decide(missing) = %v, want ErrNotFound", err)
		}

		// Expired, with and without a sweep.
		b := binding()
		b.ArgumentsHash = "args-2"
		late := e.request(t, b)
		e.clock.Advance(approvals.DefaultTTL)
		if _, err := e.svc.Decide(t.Context(), late.ID, alice, true, ""); !errors.Is(err, approvals.ErrExpired) {
			t.Errorf("Decide after expiry = %v, want ErrExpired", err)
		}
		if n, err := e.svc.Expire(t.Context()); err != nil || n != 2 {
			t.Errorf("Expire = %d, %v; want 2 (the pending and the approved-unused)", n, err)
		}
		if _, err := e.svc.Decide(t.Context(), late.ID, alice, true, ""); !errors.Is(err, approvals.ErrExpired) {
			t.Errorf("Decide after the sweep = %v, want ErrExpired", err)
		}

		// Reasons are bounded and printable.
		c := binding()
		c.ArgumentsHash = "args-3"
		open := e.request(t, c)
		for name, reason := range map[string]string{
			"too long":      string(make([]rune, approvals.MaxReasonRunes+1)),
			"a NUL":         "a\x00b",
			"an escape":     "\x1b[31mred",
			"not UTF-8":     "\xff",
			"a bidi escape": "\u0085",
		} {
			if _, err := e.svc.Decide(t.Context(), open.ID, alice, true, reason); !errors.Is(err, approvals.ErrInvalid) {
				t.Errorf("Decide with a reason holding %s = %v, want ErrInvalid", name, err)
			}
		}
		long := make([]rune, approvals.MaxReasonRunes)
		for i := range long {
			long[i] = 'é'
		}
		if _, err := e.svc.Decide(t.Context(), open.ID, alice, true, string(long)); err != nil {
			t.Errorf("Decide with a reason of %d characters = %v", approvals.MaxReasonRunes, err)
		}
	})
}

// A changed tool definition revokes the approvals granted for the old one,
// pending or approved but unused.
func TestRevokeChanged(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		pending := e.request(t, binding())
		b := binding()
		b.ArgumentsHash = "args-2"
		approved := e.approved(t, b)
		c := binding()
		c.ArgumentsHash = "args-3"
		e.approved(t, c)
		used, err := e.consume(t, c)
		if err != nil {
			t.Fatal(err)
		}

		n, err := e.svc.RevokeChanged(t.Context(), "notes_write", "def-2")
		if err != nil || n != 2 {
			t.Fatalf("RevokeChanged = %d, %v; want 2", n, err)
		}
		for id, want := range map[string]store.ApprovalStatus{
			pending.ID: store.ApprovalRevoked, approved.ID: store.ApprovalRevoked, used.ID: store.ApprovalConsumed,
		} {
			if a, _ := e.st.GetApproval(t.Context(), id); a.Status != want {
				t.Errorf("approval %s is %s, want %s", id, a.Status, want)
			}
		}
		if _, err := e.consume(t, b); !errors.Is(err, approvals.ErrNotApproved) {
			t.Errorf("Consume of a revoked approval = %v, want ErrNotApproved", err)
		}
		if _, err := e.svc.Decide(t.Context(), pending.ID, alice, true, ""); !errors.Is(err, approvals.ErrDecided) {
			t.Errorf("Decide of a revoked approval = %v, want ErrDecided", err)
		}
		// The same call under the new definition asks anew.
		b.DefinitionHash = "def-2"
		if a := e.request(t, b); a.ID == approved.ID || a.Status != store.ApprovalPending {
			t.Errorf("Request under the new definition = %+v, want a new pending request", a)
		}
		if n, err := e.svc.RevokeChanged(t.Context(), "notes_write", "def-2"); err != nil || n != 0 {
			t.Errorf("RevokeChanged again = %d, %v; want 0", n, err)
		}
		kinds := e.auditKinds(t)
		if slices.Index(kinds, "approvals_revoked") < 0 || countOf(kinds, "approvals_revoked") != 1 {
			t.Errorf("audit log = %v, want one approvals_revoked", kinds)
		}
	})
}

// Every decision is in the audit log, under the decider's name, and the
// chain verifies.
func TestDecisionsAudited(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		a := e.request(t, binding(), "grp-reviewers")
		if _, err := e.svc.Decide(t.Context(), a.ID, bob, true, "ok by me"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Decide(t.Context(), a.ID, bob, true, "again"); err == nil {
			t.Fatal("a second decision succeeded")
		}
		if got := e.auditKinds(t); !slices.Equal(got, []string{"approval_requested", "approval_decided"}) {
			t.Fatalf("audit log = %v, want a request and one decision", got)
		}
		rs, _ := e.st.AuditRecords(t.Context(), 1, 1)
		r := rs[0]
		if r.Principal != bob.ID() || r.Decision != "approved" || r.ApprovalID != a.ID || r.Tool != "notes_write" ||
			r.ArgumentsHash != "args-1" || r.PolicyHash != "policy-1" || r.RunID != "run-1" {
			t.Errorf("decision record = %+v, want Bob approving %s", r, a.ID)
		}
	})
}

func TestPending(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *env) {
		own := e.request(t, binding())
		e.clock.Advance(time.Second) // listings are oldest first
		b := binding()
		b.ArgumentsHash = "args-2"
		reviewed := e.request(t, b, "grp-reviewers")
		c := binding()
		c.ArgumentsHash = "args-3"
		e.approved(t, c)

		ids := func(p identity.Principal) []string {
			list, err := e.svc.Pending(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, a := range list {
				out = append(out, a.ID)
			}
			return out
		}
		if got := ids(alice); !slices.Equal(got, []string{own.ID, reviewed.ID}) {
			t.Errorf("Alice's pending = %v, want her two open requests", got)
		}
		if got := ids(bob); !slices.Equal(got, []string{reviewed.ID}) {
			t.Errorf("Bob's pending = %v, want the one he reviews", got)
		}
		if got := ids(aliceReviewer); !slices.Equal(got, []string{own.ID, reviewed.ID}) {
			t.Errorf("Alice the reviewer's pending = %v, want each once", got)
		}
		if got := ids(carol); len(got) != 0 {
			t.Errorf("Carol's pending = %v, want none", got)
		}
		// An approver group may be an app role: its holders see the
		// request, and decide it (TestDecideAuthorization); others do not.
		d := binding()
		d.ArgumentsHash = "args-4"
		byRole := e.request(t, d, "Usher.Admin")
		if got := ids(rose); !slices.Equal(got, []string{byRole.ID}) {
			t.Errorf("Rose's pending = %v, want the one her app role approves", got)
		}
		if got := ids(bob); !slices.Equal(got, []string{reviewed.ID}) {
			t.Errorf("Bob's pending = %v, still want only the one his group reviews", got)
		}
		if _, err := e.svc.Get(t.Context(), byRole.ID, rose); err != nil {
			t.Errorf("Get by the app role's holder: %v", err)
		}
		if _, err := e.svc.Get(t.Context(), byRole.ID, carol); !errors.Is(err, approvals.ErrNotFound) {
			t.Errorf("Get by someone without the app role: %v, want ErrNotFound", err)
		}
		if _, err := e.svc.Decide(t.Context(), byRole.ID, rose, false, "no"); err != nil {
			t.Fatalf("Decide by the app role's holder: %v", err)
		}
		decided := func(p identity.Principal) []string {
			list, _, err := e.svc.Decided(t.Context(), p, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, a := range list {
				out = append(out, a.ID)
			}
			return out
		}
		if got := decided(rose); !slices.Equal(got, []string{byRole.ID}) {
			t.Errorf("Rose's decided = %v, want the one her app role approved", got)
		}
		if got := decided(carol); len(got) != 0 {
			t.Errorf("Carol's decided = %v, want none", got)
		}
		e.clock.Advance(approvals.DefaultTTL)
		if got := ids(alice); len(got) != 0 {
			t.Errorf("Alice's pending after expiry = %v, want none", got)
		}
	})
}

func TestNewOptions(t *testing.T) {
	st := storetest.NewSQLite(t)
	if _, err := approvals.New(nil, nil); err == nil {
		t.Error("New without a store = nil error")
	}
	for name, o := range map[string]approvals.Options{
		"negative TTL":        {TTL: -time.Second},
		"relative public URL": {PublicURL: "usher.example.com"},
		"public URL query":    {PublicURL: "https://usher.example.com/?a=b"},
		"public URL scheme":   {PublicURL: "javascript:alert(1)"},
		"public URL user":     {PublicURL: "https://user:pw@usher.example.com"},
	} {
		if _, err := approvals.New(st, &o); err == nil {
			t.Errorf("New with %s = nil error", name)
		}
	}
	svc, err := approvals.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.URL("a/b"); got != "/approvals/a%2Fb" {
		t.Errorf("URL without a public URL = %s, want a relative, escaped link", got)
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}
