package approvals_test

import (
	"testing"
	"time"

	"github.com/usherhq/usher/approvals"
	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// The people of the tests. Bob and Dave review; Carol and Mallory do not.
var (
	alice   = person("alice")
	bob     = person("bob", "grp-reviewers")
	carol   = person("carol")
	dave    = person("dave", "grp-admins", "grp-reviewers")
	mallory = person("mallory", "grp-other")
	// aliceReviewer is Alice as a member of the reviewers.
	aliceReviewer = person("alice", "grp-reviewers")
	// rose holds the app role Usher.Admin (Entra "roles"), in no group.
	rose = withRoles(person("rose"), "Usher.Admin")
)

// withRoles is p holding the app roles roles.
func withRoles(p identity.Principal, roles ...string) identity.Principal {
	p.Roles = roles
	return p
}

func person(oid string, groups ...string) identity.Principal {
	return identity.Principal{Issuer: "https://idp.example.com", Tenant: "tenant-1", ObjectID: oid, Groups: groups}
}

// binding is the call the tests approve: Alice writing a note in run-1.
func binding() approvals.Binding {
	return approvals.Binding{
		Principal:      alice.ID(),
		Tool:           "notes_write",
		Server:         "demo",
		DefinitionHash: "def-1",
		ArgumentsHash:  "args-1",
		PolicyHash:     "policy-1",
		RunID:          "run-1",
		ClientID:       "usher-assistant",
	}
}

// env is a service on a real store, with its clock and audit log.
type env struct {
	st    store.Store
	svc   *approvals.Service
	clock *testenv.Clock
}

// forEachEngine runs test against a service on each engine.
func forEachEngine(t *testing.T, test func(t *testing.T, e *env)) {
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		test(t, newEnv(t, storetest.NewSQLite(t)))
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		test(t, newEnv(t, storetest.NewPostgres(t)))
	})
}

func newEnv(t *testing.T, st store.Store) *env {
	t.Helper()
	for _, id := range []string{"run-1", "run-2"} {
		if _, err := st.CreateRun(t.Context(), store.Run{ID: id, Owner: alice.ID(), Status: store.RunInProgress}); err != nil {
			t.Fatal(err)
		}
	}
	c := testenv.NewClock(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	log, err := audit.New(st, &audit.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := approvals.New(st, &approvals.Options{Now: c.Now, PublicURL: "https://usher.example.com/", Audit: log})
	if err != nil {
		t.Fatal(err)
	}
	return &env{st: st, svc: svc, clock: c}
}

// request asks approval for b, with approver groups, or fails the test.
func (e *env) request(t *testing.T, b approvals.Binding, approvers ...string) approvals.Approval {
	t.Helper()
	a, err := e.svc.Request(t.Context(), approvals.Request{
		Binding: b, Tenant: alice.Tenant, Arguments: []byte(`{"body":"milk","name":"todo"}`),
		PolicyIDs: []string{"notes-write"}, Reason: "writes a note", Approvers: approvers,
	})
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	return a
}

// consume uses the approval of the call b, with no execution, recording
// an approval_consumed entry.
func (e *env) consume(t *testing.T, b approvals.Binding) (approvals.Approval, error) {
	t.Helper()
	a, _, _, err := e.svc.Consume(t.Context(), b, nil, audit.Entry{Kind: "approval_consumed", Principal: b.Principal, Tool: b.Tool})
	return a, err
}

// approved requests approval for b and has Alice approve it.
func (e *env) approved(t *testing.T, b approvals.Binding) approvals.Approval {
	t.Helper()
	a := e.request(t, b)
	a, err := e.svc.Decide(t.Context(), a.ID, alice, true, "fine")
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return a
}

// auditKinds returns the kinds of the audit log's records, in order, and
// checks that the chain verifies.
func (e *env) auditKinds(t *testing.T) []string {
	t.Helper()
	rep, err := audit.Verify(t.Context(), e.st)
	if err != nil || !rep.Intact() {
		t.Fatalf("audit.Verify = %+v, %v; want intact", rep, err)
	}
	rs, err := e.st.AuditRecords(t.Context(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	kinds := make([]string, len(rs))
	for i, r := range rs {
		kinds[i] = r.Kind
	}
	return kinds
}
