package status_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/status"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// openStore returns a migrated SQLite store of the test's own.
func openStore(t *testing.T) store.Store {
	t.Helper()
	st := storetest.OpenSQLite(t)
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return st
}

// upstreamStates is an Upstreams of fixed states.
type upstreamStates []status.UpstreamState

func (u upstreamStates) UpstreamStates() []status.UpstreamState { return u }

// An admin is one of the groups among the token's groups or app roles;
// nothing else makes one.
func TestIsAdmin(t *testing.T) {
	t.Parallel()
	admins := status.Admins{"operators", "sre"}
	for name, c := range map[string]struct {
		p    identity.Principal
		want bool
	}{
		"group":                {identity.Principal{Groups: []string{"staff", "operators"}}, true},
		"app role":             {identity.Principal{Roles: []string{"sre"}}, true},
		"other groups":         {identity.Principal{Groups: []string{"staff"}, Roles: []string{"reader"}}, false},
		"scope is not a group": {identity.Principal{Scopes: []string{"operators"}}, false},
		"none":                 {identity.Principal{}, false},
	} {
		if got := admins.IsAdmin(c.p); got != c.want {
			t.Errorf("%s: IsAdmin = %v, want %v", name, got, c.want)
		}
	}
	if (status.Admins{""}).IsAdmin(identity.Principal{Groups: []string{""}}) {
		t.Error("an empty group made an admin")
	}
	if (status.Admins(nil)).IsAdmin(identity.Principal{Groups: []string{"operators"}}) {
		t.Error("no admins' groups made an admin")
	}
}

// Two replicas beat into one database: both are listed with their
// upstreams, the gauge counts them, one that stops leaves at once, and one
// that stays silent past AliveIntervals intervals is no longer alive.
func TestHeartbeatsAndReport(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	lastOK := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	a, err := status.NewHeartbeat(st, &status.HeartbeatOptions{ID: "replica-a", Version: "v1.2.3", Addr: "127.0.0.1:1",
		Interval: time.Hour, Registerer: reg, Upstreams: upstreamStates{
			{Name: "github", State: status.StateUp, LastOK: lastOK},
			{Name: "jira", State: status.StateDown, Error: "connection refused"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := status.NewHeartbeat(st, &status.HeartbeatOptions{ID: "replica-b", Version: "v1.2.3", Interval: time.Hour,
		Upstreams: status.UnknownUpstreams{"github", "jira"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if got := gauge(t, reg); got != 2 {
		t.Errorf("usher_replicas_alive = %v after both started, want 2", got)
	}

	now := time.Now()
	rep, err := status.Read(ctx, st, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Replicas) != 2 || rep.Replicas[0].ID != "replica-a" || rep.Replicas[0].Version != "v1.2.3" ||
		rep.Replicas[0].Addr != "127.0.0.1:1" || rep.Replicas[1].ID != "replica-b" || rep.Replicas[0].StartedAt.IsZero() {
		t.Fatalf("replicas = %+v, want a and b", rep.Replicas)
	}
	if len(rep.Upstreams) != 2 {
		t.Fatalf("upstreams = %+v, want github and jira", rep.Upstreams)
	}
	gh, jira := rep.Upstreams[0], rep.Upstreams[1]
	if gh.Name != "github" || gh.State != status.StateUp || !gh.LastOK.Equal(lastOK) || len(gh.Replicas) != 2 {
		t.Errorf("github = %+v, want up (a) and unknown (b), last ok %v", gh, lastOK)
	}
	if jira.Name != "jira" || jira.State != status.StateDown || jira.Error != "connection refused" {
		t.Errorf("jira = %+v, want down with a's error", jira)
	}
	if strings.Join(rep.Problems, "; ") != "upstream jira is down" {
		t.Errorf("problems = %q, want jira down", rep.Problems)
	}

	// b stops: it leaves at once.
	b.Stop()
	b.Stop()
	rep, err = status.Read(ctx, st, time.Now())
	if err != nil || len(rep.Replicas) != 1 || rep.Replicas[0].ID != "replica-a" {
		t.Fatalf("after b stopped: %+v, %v; want a only", rep.Replicas, err)
	}
	// a falls silent: alive until AliveIntervals intervals have passed.
	seen := rep.Replicas[0].LastSeen
	if rep, _ := status.Read(ctx, st, seen.Add(status.AliveIntervals*time.Hour-time.Second)); len(rep.Replicas) != 1 {
		t.Errorf("a second before it ages out: %+v, want a alive", rep.Replicas)
	}
	rep, err = status.Read(ctx, st, seen.Add(status.AliveIntervals*time.Hour))
	if err != nil || len(rep.Replicas) != 0 || len(rep.Upstreams) != 0 || strings.Join(rep.Problems, "; ") != "no replica is alive" {
		t.Errorf("after AliveIntervals intervals: %+v, %v; want no replica and that problem", rep, err)
	}
}

// gauge returns the value of usher_replicas_alive in reg.
func gauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "usher_replicas_alive" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("usher_replicas_alive is not registered")
	return 0
}

// The report holds the queue, the oldest pending approval (its tool, not
// its arguments) and the last checkpoint; the text puts the problems and
// the summary first.
func TestReportQueueApprovalsCheckpoint(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := st.CreateRun(ctx, store.Run{ID: "run-1", Owner: "alice", Status: store.RunInProgress}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateApprovalAudited(ctx, store.Approval{ID: "apr-1", Binding: store.ApprovalBinding{
		Principal: "i|t|alice", Tool: "notes_write", Server: "demo", DefinitionHash: "d", ArgumentsHash: "a", PolicyHash: "p", RunID: "run-1",
	}, Arguments: []byte(`{"secret":"do-not-show"}`), CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.InsertAuditCheckpoint(ctx, store.AuditCheckpoint{Seq: 7, Hash: "h", At: now.Add(-30 * time.Second), Note: "n"}); err != nil {
		t.Fatal(err)
	}
	rep, err := status.Read(ctx, st, now)
	if err != nil {
		t.Fatal(err)
	}
	if o := rep.Approvals.Oldest; rep.Approvals.Pending != 1 || o == nil || o.ID != "apr-1" || o.Tool != "notes_write" || o.AgeSeconds != 60 {
		t.Errorf("approvals = %+v (%+v), want apr-1, a minute old", rep.Approvals, o)
	}
	if c := rep.Checkpoint; c == nil || c.Seq != 7 || c.AgeSeconds != 30 {
		t.Errorf("checkpoint = %+v, want seq 7, 30s old", c)
	}
	body, _ := json.Marshal(rep)
	if bytes.Contains(body, []byte("do-not-show")) {
		t.Errorf("the report holds an approval's arguments: %s", body)
	}
	var text bytes.Buffer
	if err := status.WriteText(&text, rep); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{"0 replicas alive", "PROBLEMS\n  no replica is alive", "1 pending, oldest 1m0s ago: notes_write (demo)",
		"last checkpoint at seq 7, 30s ago", "0 queued, 0 running"} {
		if !strings.Contains(out, want) {
			t.Errorf("the text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "do-not-show") {
		t.Errorf("the text holds an approval's arguments:\n%s", out)
	}
}

// Only an admin reads GET /api/admin/status; no principal is 401, anyone
// else 403 admin_required, a query 400, and every method but GET 405.
func TestAPI(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	api, err := status.NewAPI(st, &status.APIOptions{Admins: status.Admins{"operators"}})
	if err != nil {
		t.Fatal(err)
	}
	h := api.Handler()
	admin := &identity.Principal{Issuer: "i", ObjectID: "olga", Groups: []string{"operators"}}
	for name, c := range map[string]struct {
		method, path string
		p            *identity.Principal
		code         int
		errCode      string
	}{
		"admin":           {"GET", "/api/admin/status", admin, 200, ""},
		"admin, a query":  {"GET", "/api/admin/status?x=1", admin, 400, "unknown_parameter"},
		"admin, no route": {"GET", "/api/admin/other", admin, 404, "not_found"},
		"admin, a POST":   {"POST", "/api/admin/status", admin, 405, "method_not_allowed"},
		"not an admin": {"GET", "/api/admin/status", &identity.Principal{Issuer: "i", ObjectID: "alice", Groups: []string{"staff"}},
			403, "admin_required"},
		"a reviewer's role": {"GET", "/api/admin/status", &identity.Principal{Issuer: "i", ObjectID: "rita", Roles: []string{"security"}},
			403, "admin_required"},
		"no principal": {"GET", "/api/admin/status", nil, 401, "unauthenticated"},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		if c.p != nil {
			r = r.WithContext(identity.NewContext(r.Context(), *c.p))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || (c.errCode != "" && !strings.Contains(w.Body.String(), `"code":"`+c.errCode+`"`)) {
			t.Errorf("%s: %s %s = %d %s, want %d %s", name, c.method, c.path, w.Code, w.Body, c.code, c.errCode)
		}
		if c.code == http.StatusOK {
			var rep status.Report
			if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil || rep.At.IsZero() || rep.Replicas == nil {
				t.Errorf("%s: body %s: %v, want a report", name, w.Body, err)
			}
		}
	}
}
