package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// approvalFixture is a store with two runs and a clock for approval tests.
type approvalFixture struct {
	t   *testing.T
	s   store.Store
	now time.Time
}

func newApprovalFixture(t *testing.T, s store.Store) *approvalFixture {
	t.Helper()
	mustCreateRun(t, s, store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress})
	mustCreateRun(t, s, store.Run{ID: "run-2", Owner: "alice", Status: store.RunInProgress})
	// A fixed time with digits below the microsecond, which the store drops.
	return &approvalFixture{t: t, s: s, now: time.Date(2031, 3, 4, 5, 6, 7, 891011121, time.UTC)}
}

// testBinding is the call most tests approve.
func testBinding() store.ApprovalBinding {
	return store.ApprovalBinding{
		Principal:      "issuer|tenant|alice",
		Tool:           "notes_write",
		Server:         "demo",
		DefinitionHash: "def-1",
		ArgumentsHash:  "args-1",
		PolicyHash:     "policy-1",
		RunID:          "run-1",
		ClientID:       "usher-assistant",
	}
}

// approval returns a new pending approval of b, created now and expiring
// in an hour.
func (f *approvalFixture) approval(id string, b store.ApprovalBinding) store.Approval {
	return store.Approval{
		ID:        id,
		Binding:   b,
		Arguments: []byte(`{ "name" : "todo",  "body":"milk" }`),
		PolicyIDs: []string{"notes-write-needs-approval"},
		Reason:    "writes a note",
		CreatedAt: f.now,
		ExpiresAt: f.now.Add(time.Hour),
	}
}

// create creates a and fails the test unless it is new.
func (f *approvalFixture) create(a store.Approval) store.Approval {
	f.t.Helper()
	out, created, err := f.s.CreateApprovalAudited(f.t.Context(), a, nil)
	if err != nil || !created {
		f.t.Fatalf("CreateApproval(%s) = created %v, %v; want a new approval", a.ID, created, err)
	}
	return out
}

// approved creates and approves an approval of b.
func (f *approvalFixture) approved(id string, b store.ApprovalBinding) store.Approval {
	f.t.Helper()
	f.create(f.approval(id, b))
	a, err := f.s.DecideApprovalAudited(f.t.Context(), store.DecideApprovalParams{ID: id, To: store.ApprovalApproved, DecidedBy: "issuer|tenant|alice", Reason: "fine", Now: f.now.Add(time.Minute)}, nil)
	if err != nil {
		f.t.Fatalf("DecideApproval(%s): %v", id, err)
	}
	return a
}

// consume uses the approval id, bound to b, with no execution and no
// audit record.
func consume(ctx context.Context, s store.Store, id string, b store.ApprovalBinding, now time.Time) (store.Approval, error) {
	a, _, _, err := s.ConsumeApprovalAudited(ctx, store.ConsumeApprovalParams{ID: id, Binding: b, Now: now}, nil)
	return a, err
}

// status returns the stored status of the approval id.
func (f *approvalFixture) status(id string) store.ApprovalStatus {
	f.t.Helper()
	a, err := f.s.GetApproval(f.t.Context(), id)
	if err != nil {
		f.t.Fatalf("GetApproval(%s): %v", id, err)
	}
	return a.Status
}

// bindingChanges each change one field of a binding: a call that differs in
// any of them is another call.
var bindingChanges = []struct {
	name   string
	change func(b *store.ApprovalBinding)
}{
	{"other principal", func(b *store.ApprovalBinding) { b.Principal = "issuer|tenant|mallory" }},
	{"other tool", func(b *store.ApprovalBinding) { b.Tool = "notes_delete" }},
	{"other server", func(b *store.ApprovalBinding) { b.Server = "other" }},
	{"other definition", func(b *store.ApprovalBinding) { b.DefinitionHash = "def-2" }},
	{"other arguments", func(b *store.ApprovalBinding) { b.ArgumentsHash = "args-2" }},
	{"other policy", func(b *store.ApprovalBinding) { b.PolicyHash = "policy-2" }},
	{"other run", func(b *store.ApprovalBinding) { b.RunID = "run-2" }},
	{"outside the run", func(b *store.ApprovalBinding) { b.RunID = "" }},
	{"other client", func(b *store.ApprovalBinding) { b.ClientID = "cursor" }},
}

func testCreateApproval(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	in := f.approval("apr-1", testBinding())
	in.Approvers = []string{"grp-reviewers", "grp-admins"}
	in.ToolCallID = "call-1"
	in.IdempotencyKey = "run-1/call-1"
	in.Tenant = "contoso"
	a := f.create(in)

	want := in
	want.Status = store.ApprovalPending
	want.CreatedAt = f.now.Truncate(time.Microsecond)
	want.UpdatedAt = want.CreatedAt
	want.ExpiresAt = in.ExpiresAt.Truncate(time.Microsecond)
	if !reflect.DeepEqual(a, want) {
		t.Errorf("CreateApprovalAudited returned\n%+v\nwant\n%+v", a, want)
	}
	// The arguments come back byte for byte, spaces and all.
	if string(a.Arguments) != string(in.Arguments) {
		t.Errorf("Arguments = %s, want %s byte for byte", a.Arguments, in.Arguments)
	}
	if got, err := s.GetApproval(ctx, a.ID); err != nil || !reflect.DeepEqual(got, a) {
		t.Errorf("GetApproval = %+v, %v; want %+v", got, err, a)
	}

	// The identical call finds it, whatever else the request says.
	again := f.approval("apr-2", testBinding())
	again.Reason = "asked again"
	got, created, err := s.CreateApprovalAudited(ctx, again, nil)
	if err != nil || created || got.ID != a.ID {
		t.Errorf("CreateApprovalAudited of the identical call = %s, created %v, %v; want %s, not created", got.ID, created, err, a.ID)
	}
	if _, err := s.GetApproval(ctx, "apr-2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetApproval(apr-2) = %v, want ErrNotFound: the identical request made no record", err)
	}

	// Any other call is another request.
	for i, tt := range bindingChanges {
		b := testBinding()
		tt.change(&b)
		id := fmt.Sprintf("apr-other-%d", i)
		if got, created, err := s.CreateApprovalAudited(ctx, f.approval(id, b), nil); err != nil || !created || got.ID != id {
			t.Errorf("CreateApprovalAudited with %s = %s, created %v, %v; want a new approval %s", tt.name, got.ID, created, err, id)
		}
	}

	// A taken ID is a conflict, a missing run is not found.
	dup := f.approval("apr-1", testBinding())
	dup.Binding.ArgumentsHash = "args-dup"
	if _, _, err := s.CreateApprovalAudited(ctx, dup, nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateApprovalAudited with a taken ID = %v, want ErrConflict", err)
	}
	orphan := f.approval("apr-orphan", testBinding())
	orphan.Binding.RunID = "run-missing"
	if _, _, err := s.CreateApprovalAudited(ctx, orphan, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateApprovalAudited in a missing run = %v, want ErrNotFound", err)
	}
}

func testCreateApprovalAfterEnd(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()

	// Once the request is decided, the same call asks anew.
	first := f.approved("apr-1", testBinding())
	second, created, err := s.CreateApprovalAudited(ctx, f.approval("apr-2", testBinding()), nil)
	if err != nil || !created || second.ID != "apr-2" {
		t.Fatalf("CreateApprovalAudited after a decision = %s, created %v, %v; want apr-2, created", second.ID, created, err)
	}
	if f.status(first.ID) != store.ApprovalApproved {
		t.Errorf("the approved request became %s", f.status(first.ID))
	}

	// A pending request whose time has passed is expired and replaced.
	later := f.approval("apr-3", testBinding())
	later.CreatedAt = second.ExpiresAt
	later.ExpiresAt = later.CreatedAt.Add(time.Hour)
	third, created, err := s.CreateApprovalAudited(ctx, later, nil)
	if err != nil || !created || third.ID != "apr-3" {
		t.Fatalf("CreateApprovalAudited after the pending one expired = %s, created %v, %v; want apr-3, created", third.ID, created, err)
	}
	if got := f.status("apr-2"); got != store.ApprovalExpired {
		t.Errorf("the replaced pending request is %s, want expired", got)
	}
}

// testCreateApprovalAfterDenial: outside a run, the first identical
// request after a denial is answered with it, once, and writes nothing
// else; the next asks anew. In a run, whose turn reads the decision
// itself, and after the denied approval's expiry, the request is new.
func testCreateApprovalAfterDenial(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	deny := func(id string, b store.ApprovalBinding, at time.Time) {
		t.Helper()
		if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: id, To: store.ApprovalDenied, DecidedBy: "issuer|tenant|bob", Reason: "not today", Now: at}, nil); err != nil {
			t.Fatalf("DecideApproval(%s): %v", id, err)
		}
	}
	b := testBinding()
	b.RunID = ""
	f.create(f.approval("apr-1", b))
	deny("apr-1", b, f.now.Add(time.Minute))
	// Another call is not told of it.
	for i, tt := range bindingChanges {
		other := b
		if tt.change(&other); other == b {
			continue // already outside the run
		}
		id := fmt.Sprintf("apr-other-%d", i)
		if got, created, err := s.CreateApprovalAudited(ctx, f.approval(id, other), nil); err != nil || !created || got.ID != id {
			t.Errorf("CreateApprovalAudited with %s after a denial = %s, created %v, %v; want a new approval %s", tt.name, got.ID, created, err, id)
		}
	}
	retry := f.approval("apr-2", b)
	retry.CreatedAt = f.now.Add(2 * time.Minute)
	got, created, err := s.CreateApprovalAudited(ctx, retry, nil)
	if err != nil || created || got.ID != "apr-1" || got.Status != store.ApprovalDenied || got.DecisionReason != "not today" {
		t.Fatalf("CreateApprovalAudited after a denial = %s %s %q, created %v, %v; want apr-1 denied \"not today\", not created",
			got.ID, got.Status, got.DecisionReason, created, err)
	}
	if _, err := s.GetApproval(ctx, "apr-2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetApproval(apr-2) = %v, want ErrNotFound: the retry told of the denial made no request", err)
	}
	// Told once: the next identical request is new, and so is one after
	// its denial's expiry.
	if got, created, err := s.CreateApprovalAudited(ctx, retry, nil); err != nil || !created || got.ID != "apr-2" {
		t.Errorf("CreateApprovalAudited after the denial was told = %s, created %v, %v; want apr-2, created", got.ID, created, err)
	}
	deny("apr-2", b, retry.CreatedAt.Add(time.Minute))
	late := f.approval("apr-3", b)
	late.CreatedAt = retry.ExpiresAt
	late.ExpiresAt = late.CreatedAt.Add(time.Hour)
	if got, created, err := s.CreateApprovalAudited(ctx, late, nil); err != nil || !created || got.ID != "apr-3" {
		t.Errorf("CreateApprovalAudited after the denial expired = %s, created %v, %v; want apr-3, created", got.ID, created, err)
	}

	// In a run, the turn read the decision: the same call asks anew.
	inRun := testBinding()
	f.create(f.approval("apr-run-1", inRun))
	deny("apr-run-1", inRun, f.now.Add(time.Minute))
	again := f.approval("apr-run-2", inRun)
	again.CreatedAt = f.now.Add(2 * time.Minute)
	if got, created, err := s.CreateApprovalAudited(ctx, again, nil); err != nil || !created || got.ID != "apr-run-2" {
		t.Errorf("CreateApprovalAudited in a run after a denial = %s, created %v, %v; want apr-run-2, created", got.ID, created, err)
	}

	// Of concurrent retries, one is told of the denial; the others share
	// one new request.
	race := b
	race.ArgumentsHash = "args-race"
	f.create(f.approval("apr-race", race))
	deny("apr-race", race, f.now.Add(time.Minute))
	const retries = 8
	answers := make([]store.Approval, retries)
	var wg sync.WaitGroup
	for i := range retries {
		wg.Go(func() {
			a := f.approval(fmt.Sprintf("apr-race-%d", i), race)
			a.CreatedAt = f.now.Add(2 * time.Minute)
			var err error
			if answers[i], _, err = s.CreateApprovalAudited(ctx, a, nil); err != nil {
				t.Errorf("CreateApprovalAudited of concurrent retry %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	told, asked := 0, map[string]bool{}
	for _, a := range answers {
		switch a.Status {
		case store.ApprovalDenied:
			told++
		case store.ApprovalPending:
			asked[a.ID] = true
		}
	}
	if told != 1 || len(asked) != 1 {
		t.Errorf("concurrent retries after a denial: %d told of it, %d new requests; want 1 and 1", told, len(asked))
	}
}

func testCreateApprovalInvalid(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	tests := []struct {
		name   string
		change func(a *store.Approval)
	}{
		{"no ID", func(a *store.Approval) { a.ID = "" }},
		{"no principal", func(a *store.Approval) { a.Binding.Principal = "" }},
		{"no tool", func(a *store.Approval) { a.Binding.Tool = "" }},
		{"no definition hash", func(a *store.Approval) { a.Binding.DefinitionHash = "" }},
		{"no arguments hash", func(a *store.Approval) { a.Binding.ArgumentsHash = "" }},
		{"no policy hash", func(a *store.Approval) { a.Binding.PolicyHash = "" }},
		{"already approved", func(a *store.Approval) { a.Status = store.ApprovalApproved }},
		{"no expiry", func(a *store.Approval) { a.ExpiresAt = time.Time{} }},
		{"expires when created", func(a *store.Approval) { a.ExpiresAt = a.CreatedAt }},
		{"arguments not JSON", func(a *store.Approval) { a.Arguments = []byte(`{"name":`) }},
		{"arguments not UTF-8", func(a *store.Approval) { a.Arguments = []byte("\"\xff\"") }},
		{"empty policy id", func(a *store.Approval) { a.PolicyIDs = []string{""} }},
		{"empty approver", func(a *store.Approval) { a.Approvers = []string{"grp", ""} }},
		{"NUL in the reason", func(a *store.Approval) { a.Reason = "a\x00b" }},
		{"reason not UTF-8", func(a *store.Approval) { a.Reason = "\xff" }},
		{"NUL in the client", func(a *store.Approval) { a.Binding.ClientID = "c\x00" }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.approval(fmt.Sprintf("apr-%d", i), testBinding())
			a.Binding.ArgumentsHash = fmt.Sprintf("args-%d", i)
			tt.change(&a)
			if _, _, err := s.CreateApprovalAudited(t.Context(), a, nil); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("CreateApprovalAudited = %v, want ErrInvalid", err)
			}
		})
	}
	if list, err := s.ListApprovals(t.Context(), testBinding().Principal); err != nil || len(list) != 0 {
		t.Errorf("after refused creations ListApprovals = %d approvals, %v; want none", len(list), err)
	}
}

func testCreateApprovalConcurrent(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	const racers = 8
	start := make(chan struct{})
	results := make([]store.Approval, racers)
	created := make([]bool, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			results[i], created[i], errs[i] = s.CreateApprovalAudited(t.Context(), f.approval(fmt.Sprintf("apr-%d", i), testBinding()), nil)
		})
	}
	close(start)
	wg.Wait()
	creators := 0
	for i := range racers {
		if errs[i] != nil {
			t.Errorf("racer %d: %v", i, errs[i])
			continue
		}
		if created[i] {
			creators++
		}
		if results[i].ID != results[0].ID {
			t.Errorf("racer %d got approval %s, racer 0 got %s: want one record", i, results[i].ID, results[0].ID)
		}
	}
	if creators != 1 {
		t.Errorf("%d racers created the approval, want exactly 1", creators)
	}
	if list, err := s.ListApprovals(t.Context(), testBinding().Principal); err != nil || len(list) != 1 {
		t.Errorf("ListApprovals = %d approvals, %v; want 1", len(list), err)
	}
}

func testListApprovals(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	alice := testBinding()
	bob := testBinding()
	bob.Principal = "issuer|tenant|bob"
	ids := func(list []store.Approval) []string {
		out := make([]string, len(list))
		for i, a := range list {
			out[i] = a.ID
		}
		return out
	}

	tenant := "contoso"
	mk := func(id string, b store.ApprovalBinding, minutes int, approvers ...string) {
		b.ArgumentsHash = "args-" + id
		a := f.approval(id, b)
		a.Tenant = tenant
		a.CreatedAt = f.now.Add(time.Duration(minutes) * time.Minute)
		a.ExpiresAt = a.CreatedAt.Add(time.Hour)
		a.Approvers = approvers
		f.create(a)
	}
	// Created out of ID order: listings are by creation time.
	mk("apr-c", alice, 1)
	mk("apr-a", alice, 2, "grp-reviewers")
	mk("apr-b", bob, 3, "grp-admins", "grp-reviewers")
	mk("apr-d", bob, 4)
	// The same group name in another tenant is another group.
	tenant = "fabrikam"
	carol := testBinding()
	carol.Principal = "issuer|fabrikam|carol"
	mk("apr-e", carol, 5, "grp-reviewers")
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "apr-c", To: store.ApprovalDenied, DecidedBy: alice.Principal, Reason: "no", Now: f.now.Add(5 * time.Minute)}, nil); err != nil {
		t.Fatal(err)
	}

	lists := []struct {
		name string
		list func() ([]store.Approval, error)
		want []string
	}{
		{"alice's", func() ([]store.Approval, error) { return s.ListApprovals(ctx, alice.Principal) }, []string{"apr-c", "apr-a"}},
		{"alice's pending", func() ([]store.Approval, error) {
			return s.ListApprovals(ctx, alice.Principal, store.ApprovalPending)
		}, []string{"apr-a"}},
		{"alice's pending or denied", func() ([]store.Approval, error) {
			return s.ListApprovals(ctx, alice.Principal, store.ApprovalPending, store.ApprovalDenied)
		}, []string{"apr-c", "apr-a"}},
		{"bob's", func() ([]store.Approval, error) { return s.ListApprovals(ctx, bob.Principal) }, []string{"apr-b", "apr-d"}},
		{"nobody's", func() ([]store.Approval, error) { return s.ListApprovals(ctx, "nobody") }, []string{}},
		{"reviewers'", func() ([]store.Approval, error) {
			return s.ListApprovalsForApprovers(ctx, "contoso", []string{"grp-reviewers"}, store.ApprovalPending)
		}, []string{"apr-a", "apr-b"}},
		{"admins' or others'", func() ([]store.Approval, error) {
			return s.ListApprovalsForApprovers(ctx, "contoso", []string{"grp-other", "grp-admins"})
		}, []string{"apr-b"}},
		{"no group's", func() ([]store.Approval, error) { return s.ListApprovalsForApprovers(ctx, "contoso", nil) }, []string{}},
		{"fabrikam's reviewers'", func() ([]store.Approval, error) {
			return s.ListApprovalsForApprovers(ctx, "fabrikam", []string{"grp-reviewers"})
		}, []string{"apr-e"}},
		{"reviewers' of no tenant", func() ([]store.Approval, error) {
			return s.ListApprovalsForApprovers(ctx, "", []string{"grp-reviewers"})
		}, []string{}},
		{"a group nobody names", func() ([]store.Approval, error) {
			return s.ListApprovalsForApprovers(ctx, "contoso", []string{"grp-review"})
		}, []string{}},
	}
	for _, tt := range lists {
		got, err := tt.list()
		if err != nil || !slices.Equal(ids(got), tt.want) {
			t.Errorf("%s approvals = %v, %v; want %v", tt.name, ids(got), err, tt.want)
		}
	}
	if _, err := s.ListApprovals(ctx, alice.Principal, "waiting"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ListApprovals with an unknown status = %v, want ErrInvalid", err)
	}
	if _, err := s.GetApproval(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetApproval(missing) = %v, want ErrNotFound", err)
	}
}

func testDecideApproval(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	a := f.create(f.approval("apr-1", testBinding()))
	at := f.now.Add(time.Minute)

	got, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: a.ID, To: store.ApprovalApproved, DecidedBy: "issuer|tenant|bob", Reason: "looks right", Now: at}, nil)
	if err != nil {
		t.Fatalf("DecideApprovalAudited: %v", err)
	}
	want := a
	want.Status = store.ApprovalApproved
	want.DecidedBy = "issuer|tenant|bob"
	want.DecisionReason = "looks right"
	want.DecidedAt = at.Truncate(time.Microsecond)
	want.UpdatedAt = want.DecidedAt
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DecideApprovalAudited returned\n%+v\nwant\n%+v", got, want)
	}

	// Decisions are final.
	for _, to := range []store.ApprovalStatus{store.ApprovalDenied, store.ApprovalApproved} {
		if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: a.ID, To: to, DecidedBy: "issuer|tenant|carol", Now: at}, nil); !errors.Is(err, store.ErrConflict) {
			t.Errorf("DecideApproval(%s) of a decided approval = %v, want ErrConflict", to, err)
		}
	}
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "missing", To: store.ApprovalDenied, DecidedBy: "issuer|tenant|bob", Now: at}, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DecideApproval(missing) = %v, want ErrNotFound", err)
	}

	// An expired approval cannot be decided, even before a sweep.
	b := testBinding()
	b.ArgumentsHash = "args-2"
	late := f.create(f.approval("apr-2", b))
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: late.ID, To: store.ApprovalApproved, DecidedBy: "issuer|tenant|bob", Now: late.ExpiresAt}, nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("DecideApprovalAudited at the expiry = %v, want ErrConflict", err)
	}
	if f.status(late.ID) != store.ApprovalPending {
		t.Errorf("a refused decision changed the status to %s", f.status(late.ID))
	}

	invalid := []struct {
		name      string
		to        store.ApprovalStatus
		decidedBy string
		reason    string
		at        time.Time
	}{
		{"to consumed", store.ApprovalConsumed, "bob", "", at},
		{"to pending", store.ApprovalPending, "bob", "", at},
		{"to unknown", "ok", "bob", "", at},
		{"no decider", store.ApprovalApproved, "", "", at},
		{"NUL in the reason", store.ApprovalApproved, "bob", "\x00", at},
		{"no time", store.ApprovalApproved, "bob", "", time.Time{}},
	}
	for _, tt := range invalid {
		if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: late.ID, To: tt.to, DecidedBy: tt.decidedBy, Reason: tt.reason, Now: tt.at}, nil); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("DecideApprovalAudited %s = %v, want ErrInvalid", tt.name, err)
		}
	}
}

func testConsumeApproval(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	b := testBinding()
	a := f.approved("apr-1", b)
	at := f.now.Add(2 * time.Minute)

	// Any other call is refused, and the approval stays usable.
	for _, tt := range bindingChanges {
		other := b
		tt.change(&other)
		if _, err := consume(ctx, s, a.ID, other, at); !errors.Is(err, store.ErrConflict) {
			t.Errorf("ConsumeApprovalAudited with %s = %v, want ErrConflict", tt.name, err)
		}
		if _, err := s.FindApproved(ctx, other, at); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("FindApproved with %s = %v, want ErrNotFound", tt.name, err)
		}
	}
	if _, err := consume(ctx, s, a.ID, b, a.ExpiresAt); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ConsumeApprovalAudited at the expiry = %v, want ErrConflict", err)
	}
	if _, err := s.FindApproved(ctx, b, a.ExpiresAt); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FindApproved at the expiry = %v, want ErrNotFound", err)
	}
	if _, err := consume(ctx, s, "missing", b, at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ConsumeApproval(missing) = %v, want ErrNotFound", err)
	}
	if f.status(a.ID) != store.ApprovalApproved {
		t.Fatalf("refused consumptions changed the status to %s", f.status(a.ID))
	}

	found, err := s.FindApproved(ctx, b, at)
	if err != nil || found.ID != a.ID {
		t.Fatalf("FindApproved = %s, %v; want %s", found.ID, err, a.ID)
	}
	used, err := consume(ctx, s, a.ID, b, at)
	if err != nil {
		t.Fatalf("ConsumeApprovalAudited: %v", err)
	}
	if used.Status != store.ApprovalConsumed || used.ConsumedAt != at.Truncate(time.Microsecond) || used.UpdatedAt != used.ConsumedAt {
		t.Errorf("ConsumeApprovalAudited returned %+v, want consumed at %v", used, at)
	}
	if used.DecidedBy != a.DecidedBy || used.DecidedAt != a.DecidedAt {
		t.Errorf("ConsumeApprovalAudited changed the decision: %+v, was %+v", used, a)
	}

	// Single use.
	if _, err := consume(ctx, s, a.ID, b, at); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second ConsumeApprovalAudited = %v, want ErrConflict", err)
	}
	if _, err := s.FindApproved(ctx, b, at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FindApproved after the use = %v, want ErrNotFound", err)
	}

	// Only approved approvals are consumed.
	for i, to := range []store.ApprovalStatus{store.ApprovalPending, store.ApprovalDenied} {
		other := b
		other.ArgumentsHash = fmt.Sprintf("args-%s", to)
		id := fmt.Sprintf("apr-%d", i+2)
		f.create(f.approval(id, other))
		if to != store.ApprovalPending {
			if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: id, To: to, DecidedBy: b.Principal, Now: at}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := consume(ctx, s, id, other, at); !errors.Is(err, store.ErrConflict) {
			t.Errorf("ConsumeApprovalAudited of a %s approval = %v, want ErrConflict", to, err)
		}
		if _, err := s.FindApproved(ctx, other, at); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("FindApproved of a %s approval = %v, want ErrNotFound", to, err)
		}
	}

	if _, err := consume(ctx, s, a.ID, store.ApprovalBinding{}, at); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ConsumeApprovalAudited with an empty binding = %v, want ErrInvalid", err)
	}
	if _, err := s.FindApproved(ctx, b, time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("FindApproved at the zero time = %v, want ErrInvalid", err)
	}
}

func testConsumeApprovalRace(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	b := testBinding()
	a := f.approved("apr-1", b)
	at := f.now.Add(2 * time.Minute)

	oneWins(t, 8, "consumed the approval", func(int) error {
		_, err := consume(t.Context(), s, a.ID, b, at)
		return err
	})
}

func testRevokeApprovals(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	at := f.now.Add(2 * time.Minute)
	with := func(tool, def, args string) store.ApprovalBinding {
		b := testBinding()
		b.Tool, b.DefinitionHash, b.ArgumentsHash = tool, def, args
		return b
	}
	f.create(f.approval("pending-old", with("notes_write", "def-1", "a1")))
	f.approved("approved-old", with("notes_write", "def-1", "a2"))
	consumed := with("notes_write", "def-1", "a3")
	f.approved("consumed-old", consumed)
	if _, err := consume(ctx, s, "consumed-old", consumed, at); err != nil {
		t.Fatal(err)
	}
	f.create(f.approval("denied-old", with("notes_write", "def-1", "a4")))
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "denied-old", To: store.ApprovalDenied, DecidedBy: "x", Now: at}, nil); err != nil {
		t.Fatal(err)
	}
	f.create(f.approval("pending-current", with("notes_write", "def-2", "a5")))
	f.approved("approved-current", with("notes_write", "def-2", "a6"))
	f.create(f.approval("pending-other-tool", with("notes_read", "def-1", "a7")))

	n, err := s.RevokeApprovalsAudited(ctx, "notes_write", "def-2", at, nil)
	if err != nil || n != 2 {
		t.Errorf("RevokeApprovalsAudited = %d, %v; want 2", n, err)
	}
	want := map[string]store.ApprovalStatus{
		"pending-old":        store.ApprovalRevoked,
		"approved-old":       store.ApprovalRevoked,
		"consumed-old":       store.ApprovalConsumed,
		"denied-old":         store.ApprovalDenied,
		"pending-current":    store.ApprovalPending,
		"approved-current":   store.ApprovalApproved,
		"pending-other-tool": store.ApprovalPending,
	}
	for id, st := range want {
		if got := f.status(id); got != st {
			t.Errorf("after RevokeApprovalsAudited %s is %s, want %s", id, got, st)
		}
	}
	// A revoked approval is never consumed.
	if _, err := consume(ctx, s, "approved-old", with("notes_write", "def-1", "a2"), at); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ConsumeApprovalAudited of a revoked approval = %v, want ErrConflict", err)
	}
	if n, err := s.RevokeApprovalsAudited(ctx, "notes_write", "def-2", at, nil); err != nil || n != 0 {
		t.Errorf("RevokeApprovalsAudited again = %d, %v; want 0", n, err)
	}
	for name, args := range map[string][2]string{"no tool": {"", "def-2"}, "no hash": {"notes_write", ""}} {
		if _, err := s.RevokeApprovalsAudited(ctx, args[0], args[1], at, nil); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("RevokeApprovalsAudited with %s = %v, want ErrInvalid", name, err)
		}
	}
}

// testRevokeApprovalsAudited checks that a revocation is written with its
// record, which is told how many it revoked, or not at all, and that
// revoking none records nothing.
func testRevokeApprovalsAudited(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	at := f.now.Add(time.Minute).Truncate(time.Microsecond)
	old := testBinding()
	f.create(f.approval("pending-old", old))
	old.ArgumentsHash = "args-approved"
	f.approved("approved-old", old)
	errBuild := errors.New("hashing failed")
	var told []int
	build := func(fail bool) func(int) func(store.AuditHead) (store.AuditRecord, error) {
		return func(n int) func(store.AuditHead) (store.AuditRecord, error) {
			told = append(told, n)
			if fail {
				return func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errBuild }
			}
			return chained(store.AuditRecord{At: at, Kind: "approvals_revoked", Tool: old.Tool})
		}
	}
	keep := "def-current"

	if n, err := s.RevokeApprovalsAudited(ctx, old.Tool, keep, at, build(true)); err != errBuild || n != 0 {
		t.Errorf("RevokeApprovalsAudited with a failing build = %d, %v; want 0 and its error as is", n, err)
	}
	if st1, st2 := f.status("pending-old"), f.status("approved-old"); st1 != store.ApprovalPending || st2 != store.ApprovalApproved {
		t.Errorf("after a failed audited revocation the approvals are %s and %s, want pending and approved", st1, st2)
	}
	if n := auditCount(t, s); n != 0 {
		t.Errorf("after a failed audited revocation the log has %d records, want 0", n)
	}
	told = nil
	if n, err := s.RevokeApprovalsAudited(ctx, old.Tool, keep, at, build(false)); err != nil || n != 2 {
		t.Fatalf("RevokeApprovalsAudited = %d, %v; want 2", n, err)
	}
	if len(told) == 0 || told[len(told)-1] != 2 {
		t.Errorf("the record was built for %v revoked, want 2", told)
	}
	if st1, st2 := f.status("pending-old"), f.status("approved-old"); st1 != store.ApprovalRevoked || st2 != store.ApprovalRevoked {
		t.Errorf("after an audited revocation the approvals are %s and %s, want revoked", st1, st2)
	}
	if n := auditCount(t, s); n != 1 {
		t.Errorf("after an audited revocation the log has %d records, want 1", n)
	}
	told = nil
	if n, err := s.RevokeApprovalsAudited(ctx, old.Tool, keep, at, build(false)); err != nil || n != 0 || len(told) != 0 {
		t.Errorf("RevokeApprovalsAudited of none = %d, %v, built %d records; want 0, none", n, err, len(told))
	}
	if n := auditCount(t, s); n != 1 {
		t.Errorf("after revoking none the log has %d records, want 1", n)
	}
}

func testExpireApprovals(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	with := func(args string, minutes int) store.Approval {
		b := testBinding()
		b.ArgumentsHash = args
		a := f.approval(args, b)
		a.ExpiresAt = f.now.Add(time.Duration(minutes) * time.Minute)
		return a
	}
	f.create(with("pending-due", 10))
	f.create(with("approved-due", 10))
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "approved-due", To: store.ApprovalApproved, DecidedBy: "x", Now: f.now}, nil); err != nil {
		t.Fatal(err)
	}
	f.create(with("denied-due", 10))
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "denied-due", To: store.ApprovalDenied, DecidedBy: "x", Now: f.now}, nil); err != nil {
		t.Fatal(err)
	}
	f.create(with("pending-later", 11))

	n, err := s.ExpireApprovals(ctx, f.now.Add(10*time.Minute))
	if err != nil || n != 2 {
		t.Errorf("ExpireApprovals = %d, %v; want 2", n, err)
	}
	want := map[string]store.ApprovalStatus{
		"pending-due":   store.ApprovalExpired,
		"approved-due":  store.ApprovalExpired,
		"denied-due":    store.ApprovalDenied,
		"pending-later": store.ApprovalPending,
	}
	for id, st := range want {
		if got := f.status(id); got != st {
			t.Errorf("after ExpireApprovals %s is %s, want %s", id, got, st)
		}
	}
	if _, err := s.ExpireApprovals(ctx, time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ExpireApprovals at the zero time = %v, want ErrInvalid", err)
	}
}

// auditCount is the number of records of s's audit log.
func auditCount(t *testing.T, s store.Store) int {
	t.Helper()
	records, err := s.AuditRecords(t.Context(), 0, 1000)
	if err != nil {
		t.Fatalf("AuditRecords: %v", err)
	}
	return len(records)
}

// logCount follows how many records the audit log holds: want checks
// that it gained n since the last check, skip that it may have gained n
// unchecked.
type logCount struct {
	t       *testing.T
	s       store.Store
	records int
}

// countLog starts a logCount at the log's present length.
func countLog(t *testing.T, s store.Store) *logCount {
	t.Helper()
	return &logCount{t: t, s: s, records: auditCount(t, s)}
}

// want checks that the log gained n records since the last check, after
// what.
func (c *logCount) want(n int, after string) {
	c.t.Helper()
	c.records += n
	if got := auditCount(c.t, c.s); got != c.records {
		c.t.Errorf("after %s the log has %d records, want %d", after, got, c.records)
	}
}

// reset takes the log's present length as the next check's start.
func (c *logCount) reset() {
	c.t.Helper()
	c.records = auditCount(c.t, c.s)
}

// testApprovalsAudited checks that each approval write and its audit
// record are one transaction: a failure between them (the record's build
// fails, or a constraint refuses the write) leaves neither.
func testApprovalsAudited(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	ctx := t.Context()
	at := f.now.Truncate(time.Microsecond)
	b := testBinding()
	builds := 0
	build := func(kind string) func(store.AuditHead) (store.AuditRecord, error) {
		return func(h store.AuditHead) (store.AuditRecord, error) {
			builds++
			return chained(store.AuditRecord{At: at, Kind: kind, Tool: b.Tool})(h)
		}
	}
	errBuild := errors.New("hashing failed")
	failing := func(store.AuditHead) (store.AuditRecord, error) { return store.AuditRecord{}, errBuild }
	records := func(want int, after string) {
		t.Helper()
		if n := auditCount(t, s); n != want {
			t.Errorf("after %s the log has %d records, want %d", after, n, want)
		}
	}

	// A request.
	if _, _, err := s.CreateApprovalAudited(ctx, f.approval("apr-1", b), failing); err != errBuild {
		t.Errorf("CreateApprovalAudited with a failing build = %v, want its error as is", err)
	}
	if _, err := s.GetApproval(ctx, "apr-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a failed audited request GetApproval = %v, want ErrNotFound", err)
	}
	records(0, "a failed request")
	a, created, err := s.CreateApprovalAudited(ctx, f.approval("apr-1", b), build("approval_requested"))
	if err != nil || !created || a.ID != "apr-1" {
		t.Fatalf("CreateApprovalAudited = %s, created %v, %v", a.ID, created, err)
	}
	records(1, "a request")
	builds = 0
	if again, created, err := s.CreateApprovalAudited(ctx, f.approval("apr-2", b), build("approval_requested")); err != nil || created || again.ID != "apr-1" {
		t.Errorf("CreateApprovalAudited of the identical call = %s, created %v, %v; want apr-1 found", again.ID, created, err)
	}
	if builds != 0 {
		t.Errorf("finding the identical request built %d records", builds)
	}
	records(1, "finding the identical request")
	dup := f.approval("apr-1", b)
	dup.Binding.ArgumentsHash = "args-dup"
	if _, _, err := s.CreateApprovalAudited(ctx, dup, build("approval_requested")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateApprovalAudited with a taken ID = %v, want ErrConflict", err)
	}
	records(1, "a request refused by the primary key")

	// A decision.
	decidedAt := f.now.Add(time.Minute)
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "apr-1", To: store.ApprovalApproved, DecidedBy: "bob", Reason: "fine", Now: decidedAt}, failing); err != errBuild {
		t.Errorf("DecideApprovalAudited with a failing build = %v, want its error as is", err)
	}
	if st := f.status("apr-1"); st != store.ApprovalPending {
		t.Errorf("after a failed audited decision the approval is %s, want pending", st)
	}
	records(1, "a failed decision")
	if d, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "apr-1", To: store.ApprovalApproved, DecidedBy: "bob", Reason: "fine", Now: decidedAt}, build("approval_decided")); err != nil || d.Status != store.ApprovalApproved || d.DecidedBy != "bob" {
		t.Fatalf("DecideApprovalAudited = %+v, %v", d, err)
	}
	records(2, "a decision")
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "apr-1", To: store.ApprovalDenied, DecidedBy: "bob", Now: decidedAt}, build("approval_decided")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a second DecideApprovalAudited = %v, want ErrConflict", err)
	}
	if _, err := s.DecideApprovalAudited(ctx, store.DecideApprovalParams{ID: "missing", To: store.ApprovalDenied, DecidedBy: "bob", Now: decidedAt}, build("approval_decided")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DecideApprovalAudited(missing) = %v, want ErrNotFound", err)
	}
	records(2, "refused decisions")

	// A use, with the execution it starts.
	usedAt := f.now.Add(2 * time.Minute)
	exec := testExecution("consume/call-1", usedAt)
	exec.ApprovalID = "apr-1"
	if _, _, _, err := s.ConsumeApprovalAudited(ctx, store.ConsumeApprovalParams{ID: "apr-1", Binding: b, Now: usedAt, Execution: &exec}, failing); err != errBuild {
		t.Errorf("ConsumeApprovalAudited with a failing build = %v, want its error as is", err)
	}
	if st := f.status("apr-1"); st != store.ApprovalApproved {
		t.Errorf("after a failed audited use the approval is %s, want approved", st)
	}
	if _, err := s.GetExecution(ctx, exec.IdempotencyKey); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a failed audited use GetExecution = %v, want ErrNotFound", err)
	}
	records(2, "a failed use")
	used, started, startedExec, err := consumeAudited(s, t, "apr-1", b, usedAt, &exec, build("approval_consumed"))
	if err != nil || !started || used.Status != store.ApprovalConsumed || startedExec.Status != store.ExecutionStarted || startedExec.ApprovalID != "apr-1" {
		t.Fatalf("ConsumeApprovalAudited = %+v, %+v, started %v, %v", used, startedExec, started, err)
	}
	if got, err := s.GetExecution(ctx, exec.IdempotencyKey); err != nil || !reflect.DeepEqual(got, startedExec) {
		t.Errorf("GetExecution = %+v, %v; want %+v", got, err, startedExec)
	}
	records(3, "a use")
	if _, _, _, err := s.ConsumeApprovalAudited(ctx, store.ConsumeApprovalParams{ID: "apr-1", Binding: b, Now: usedAt}, build("approval_consumed")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a second ConsumeApprovalAudited = %v, want ErrConflict", err)
	}
	records(3, "a refused use")

	// A key that names an execution already: nothing is used or written.
	b2 := b
	b2.ArgumentsHash = "args-2"
	f.approved("apr-3", b2)
	builds = 0
	taken := testExecution("consume/call-1", usedAt)
	taken.ArgumentsHash = "args-2"
	a3, found, started, err := s.ConsumeApprovalAudited(ctx, store.ConsumeApprovalParams{ID: "apr-3", Binding: b2, Now: usedAt, Execution: &taken}, build("approval_consumed"))
	if err != nil || started || !reflect.DeepEqual(found, startedExec) || a3.ID != "" {
		t.Errorf("ConsumeApprovalAudited with a taken key = %+v, %+v, started %v, %v; want the existing execution, not started", a3, found, started, err)
	}
	if st := f.status("apr-3"); st != store.ApprovalApproved {
		t.Errorf("a use with a taken key left the approval %s, want approved", st)
	}
	records(3, "a use with a taken key")

	// Without an execution, the use and its record.
	if used, _, _, err := s.ConsumeApprovalAudited(ctx, store.ConsumeApprovalParams{ID: "apr-3", Binding: b2, Now: usedAt}, build("approval_consumed")); err != nil || used.Status != store.ApprovalConsumed {
		t.Errorf("ConsumeApprovalAudited without an execution = %+v, %v", used, err)
	}
	records(4, "a use without an execution")
}

// consumeAudited calls ConsumeApprovalAudited, its results reordered for
// the test's reading.
func consumeAudited(s store.Store, t *testing.T, id string, b store.ApprovalBinding, now time.Time, e *store.Execution, build func(store.AuditHead) (store.AuditRecord, error)) (store.Approval, bool, store.Execution, error) {
	a, exec, started, err := s.ConsumeApprovalAudited(t.Context(), store.ConsumeApprovalParams{ID: id, Binding: b, Now: now, Execution: e}, build)
	return a, started, exec, err
}

// testConsumeApprovalAuditedRace checks that of concurrent audited uses
// of one approval, each with its own execution, one wins: one record, one
// execution.
func testConsumeApprovalAuditedRace(t *testing.T, s store.Store) {
	f := newApprovalFixture(t, s)
	b := testBinding()
	a := f.approved("apr-1", b)
	at := f.now.Add(2 * time.Minute)
	before := auditCount(t, s)

	const racers = 8
	start := make(chan struct{})
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			e := testExecution(fmt.Sprintf("race/call-%d", i), at)
			_, _, _, errs[i] = s.ConsumeApprovalAudited(t.Context(), store.ConsumeApprovalParams{ID: a.ID, Binding: b, Now: at, Execution: &e}, chained(store.AuditRecord{At: at.Truncate(time.Microsecond), Kind: "approval_consumed"}))
		})
	}
	close(start)
	wg.Wait()
	won, executions := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("racer %d: %v, want nil or ErrConflict", i, err)
		}
		if _, err := s.GetExecution(t.Context(), fmt.Sprintf("race/call-%d", i)); err == nil {
			executions++
		}
	}
	if won != 1 || executions != 1 {
		t.Errorf("%d racers won and %d executions started, want 1 and 1", won, executions)
	}
	if n := auditCount(t, s) - before; n != 1 {
		t.Errorf("%d records were appended, want 1", n)
	}
}
