package browser

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	_ "modernc.org/sqlite"

	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/policy"
)

// reviewPolicy allows notes_list, has finance approve each note written,
// and denies notes_delete: the matrix has a column for finance.
const reviewPolicy = `
@id("allow-notes-list")
@outcome("allow")
@reason("notes_list only lists the caller's own notes")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_list")
when { resource.server == "builtin" };

@id("finance-approves-writes")
@outcome("approve")
@approvers("finance")
@reason("a note written is kept")
permit (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_write");

@id("deny-notes-delete")
@reason("notes_delete cannot be undone")
forbid (principal, action == Usher::Action::"call_tool", resource == Usher::Tool::"notes_delete");
`

// reviewedDescription is the description sessions_list had when it was
// reviewed, as reviewServer's lock says.
const reviewedDescription = "Lists your sessions (the description reviewed)."

// reviewServer is `usher serve` with reviewers (the group security), the
// review policy, checkpoints every second, and a tool lock in which
// sessions_list was reviewed with another description.
func reviewServer(t *testing.T) *server {
	t.Helper()
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.cedar")
	if err := os.WriteFile(policyFile, []byte(reviewPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"USHER_REVIEW_GROUPS":             "security",
		"USHER_POLICY_FILE":               policyFile,
		"USHER_AUDIT_CHECKPOINT_INTERVAL": "1s",
	}
	data := filepath.Join(dir, "data")
	locking := exec.Command(testenv.Usher(t), "tools", "lock", "--data-dir", data)
	locking.Env = usherEnv(env)
	if out, err := locking.CombinedOutput(); err != nil {
		t.Fatalf("usher tools lock: %v\n%s", err, out)
	}
	lockFile := filepath.Join(data, "tools.lock")
	lock, err := policy.ReadLock(lockFile)
	if err != nil {
		t.Fatal(err)
	}
	reviewed, ok := lock.Definitions["sessions_list"]
	if !ok {
		t.Fatalf("usher tools lock kept no definition of sessions_list: %+v", lock.Definitions)
	}
	reviewed.Description = reviewedDescription
	if lock.Tools["sessions_list"], err = policy.DefinitionHash(reviewed); err != nil {
		t.Fatal(err)
	}
	lock.Definitions["sessions_list"] = reviewed
	if err := lock.Write(lockFile); err != nil {
		t.Fatal(err)
	}
	return startServerIn(t, data, env)
}

// signInWith signs in through the development provider's form with
// groups.
func (tb *tab) signInWith(base, user, groups string) {
	tb.t.Helper()
	tb.do(chromedp.Navigate(base + "/"))
	tb.click(`main.signin a.button.primary[href^="/auth/login"]`)
	tb.waitUntil("the development provider's form", `location.pathname.startsWith("/dev/oidc/") && document.querySelector("#groups")`)
	tb.typeText("#username", user)
	tb.typeText("#groups", groups)
	tb.click(`form button[type=submit]`)
	tb.waitUntil("signed in as "+user, `location.origin === `+js(base)+` && document.querySelector(".topbar .user-name")?.textContent === `+js(user))
}

// tabTo presses Tab until the focus is on an element matching sel.
func (tb *tab) tabTo(sel string) {
	tb.t.Helper()
	for range 80 {
		if evaluate[bool](tb, `Boolean(document.activeElement?.matches(`+js(sel)+`))`) {
			return
		}
		tb.do(chromedp.KeyEvent(kb.Tab))
	}
	tb.t.Fatalf("%s: Tab never reached %s\n%s", tb.name, sel, tb.describe())
}

// checkAxeReview runs axe on a Review page at every size and theme
// (axeVariants), failing on any serious or critical violation and also on
// the moderate heading-order and landmark-unique ones, which the Review
// pages must not have either; it leaves the tab at 1280×800, light.
func checkAxeReview(t *testing.T, tb *tab, screen string) {
	t.Helper()
	background := map[string]string{}
	for _, v := range axeVariants {
		tb.setVariant(v)
		background[v.scheme] = evaluate[string](tb, `getComputedStyle(document.body).backgroundColor`)
		findings, ok := axeFindings(t, tb, screen)
		if !ok {
			return
		}
		for _, f := range findings {
			if f.Impact == "serious" || f.Impact == "critical" || f.ID == "heading-order" || f.ID == "landmark-unique" {
				t.Errorf("%s at %s: axe %s (%s): %s — %s", screen, v.name, f.ID, f.Impact, f.Help, strings.Join(f.Targets, "; "))
			}
		}
	}
	if background["light"] == background["dark"] {
		t.Errorf("%s: the same background in the light and the dark theme (%s)", screen, background["light"])
	}
	tb.setVariant(axeVariants[0])
}

// alicesCall has the demo model call tool with args in a new run of
// alice's, and waits for the turn (or its pause for an approval).
func alicesCall(t *testing.T, s *server, alice, tool, args string) {
	t.Helper()
	code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"review"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	msg := fmt.Sprintf(`call %s %s`, tool, args)
	if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+run["runId"].(string)+"/messages?wait=30s", alice, fmt.Sprintf(`{"content":%s}`, js(msg))); code != 200 && code != 202 {
		t.Fatalf("turn = %d %v", code, body)
	}
}

// auditRecords are the records of GET /api/audit?query as token reads
// them.
func auditRecords(t *testing.T, s *server, token, query string) []map[string]any {
	t.Helper()
	code, page := apitest.Call(t, "GET", s.url+"/api/audit?"+query, token, "")
	if code != 200 {
		t.Fatalf("GET /api/audit?%s = %d %v", query, code, page)
	}
	var out []map[string]any
	for _, r := range page["records"].([]any) {
		out = append(out, r.(map[string]any))
	}
	return out
}

// TestBrowserReview walks the Review section as a security reviewer would
// — by keyboard, from the Review link: alice's calls in the audit log,
// filtered, a new one arriving live, paged, a record with its hashes, the
// chain verified with its last checkpoint, the policy's statements and
// matrix, the changed tool's diff against the lock, every approval of the
// tenant, and the chain broken where a record was edited —
// with axe on each page at each size and theme; and as a person who is
// not a reviewer: no Review link, and the Review pages say so.
func TestBrowserReview(t *testing.T) {
	t.Parallel()
	s := reviewServer(t)
	alice := userToken(t, s, "alice")
	rita, err := s.cli(t, "token", "user", "--sub", "rita", "--group", "security")
	if err != nil {
		t.Fatal(err)
	}
	_, me := apitest.Call(t, "GET", s.url+"/api/me", alice, "")
	aliceID := me["id"].(string)
	alicesCall(t, s, alice, "notes_list", `{}`)
	alicesCall(t, s, alice, "notes_write", `{"name":"groceries","body":"milk"}`)
	code, pending := apitest.Call(t, "GET", s.url+"/api/approvals", alice, "")
	if code != 200 || len(pending["approvals"].([]any)) != 1 {
		t.Fatalf("alice's approvals = %d %v", code, pending)
	}
	approvalID := pending["approvals"].([]any)[0].(map[string]any)["id"].(string)

	tb := startBrowser(t)

	// Not a reviewer: no Review link, and the pages say why; the API
	// answers 403 reviewer_required.
	tb.signIn(s.url, "bob")
	tb.expectLog("status of 403 (Forbidden)")
	tb.waitUntil("the home screen", `document.querySelector("#home-title")`)
	if evaluate[bool](tb, `Boolean(document.querySelector('.topbar a[href^="/review"]'))`) {
		t.Errorf("bob, no reviewer, has a Review link")
	}
	for _, page := range []string{"/review", "/review/policy", "/review/approvals"} {
		tb.do(chromedp.Navigate(s.url + page))
		tb.waitUntil("the not-a-reviewer state on "+page, `document.querySelector(".review .not-reviewer")?.textContent.includes("You are not a security reviewer")`)
		if n := evaluate[int](tb, `document.querySelectorAll(".review .not-reviewer").length`); n != 1 {
			t.Errorf("%s: %d not-a-reviewer notes, want 1", page, n)
		}
	}
	checkAxe(t, tb, "the Review page of a non-reviewer")
	bob := userToken(t, s, "bob")
	if code, body := apitest.Call(t, "GET", s.url+"/api/audit", bob, ""); code != 403 || apitest.ErrorCode(body) != "reviewer_required" {
		t.Errorf("bob's GET /api/audit = %d %v", code, body)
	}
	tb.mu.Lock()
	tb.tolerate = nil // from here on, a refusal is a failure
	tb.mu.Unlock()
	tb.click(`.topbar .user button.button.subtle`)
	tb.waitUntil("signed out", `document.querySelector("main.signin")`)

	// A reviewer: the Review link, reached and followed by keyboard.
	tb.signInWith(s.url, "rita", "security")
	tb.waitUntil("the home screen", `document.querySelector("#home-title")`)
	tb.waitUntil("the Review link", `document.querySelector('.topnav a[href="/review"]')`)
	evaluate[bool](tb, `(document.activeElement.blur(), true)`)
	tb.tabTo(`.topnav a[href="/review"]`)
	tb.do(pressEnter)
	tb.waitUntil("the audit log, its heading focused", `location.pathname === "/review" && document.activeElement?.id === "review-title" && document.querySelector(".audit-table tbody tr")`)

	// Alice's calls, as the API lists them.
	type row struct{ Seq, Kind, Principal, Tool string }
	rows := func() []row {
		return evaluate[[]row](tb, `[...document.querySelectorAll(".audit-table tbody tr")].map((r) => ({
			Seq: r.dataset.seq, Kind: r.cells[2].textContent, Principal: r.cells[3].textContent, Tool: r.cells[4].textContent }))`)
	}
	apiSeqs := func(query string) []string {
		t.Helper()
		var out []string
		for _, r := range auditRecords(t, s, rita, query) {
			out = append(out, fmt.Sprint(r["seq"]))
		}
		return out
	}
	tb.waitUntil("alice's notes_write in the log", `[...document.querySelectorAll(".audit-table tbody tr")].some((r) => r.cells[4].textContent === "notes_write" && r.cells[3].textContent === `+js(aliceID)+`)`)
	shown := rows()
	var seqs []string
	for _, r := range shown {
		seqs = append(seqs, r.Seq)
	}
	if want := apiSeqs("order=desc&limit=50"); !slices.Equal(seqs, want) {
		t.Errorf("the log shows records %v; the API lists %v", seqs, want)
	}

	// Filtered by keyboard: tool=notes_write, as the API filters it.
	tb.tabTo("#filter-tool")
	tb.do(chromedp.SendKeys(chromedp.CSS("#filter-tool"), "notes_write"))
	tb.do(pressEnter)
	tb.waitUntil("the filtered records", `location.search === "?tool=notes_write" && [...document.querySelectorAll(".audit-table tbody tr")].every((r) => r.cells[4].textContent === "notes_write")`)
	seqs = seqs[:0]
	for _, r := range rows() {
		seqs = append(seqs, r.Seq)
	}
	if want := apiSeqs("tool=notes_write&order=desc&limit=50"); len(want) == 0 || !slices.Equal(seqs, want) {
		t.Errorf("filtered, the log shows %v; the API lists %v", seqs, want)
	}
	checkAxeReview(t, tb, "the audit log")

	// Live: a call of alice's appears without a reload.
	before := len(seqs)
	alicesCall(t, s, alice, "notes_write", `{"name":"chores","body":"dishes"}`)
	tb.waitUntil("the new call, live", fmt.Sprintf(`document.querySelectorAll(".audit-table tbody tr").length > %d`, before))
	if want := apiSeqs("tool=notes_write&order=desc&limit=50"); !slices.Equal(func() []string {
		var out []string
		for _, r := range rows() {
			out = append(out, r.Seq)
		}
		return out
	}(), want) {
		t.Errorf("after the live update, the log differs from the API's %v", want)
	}

	// The chain: verified to the head, and the last checkpoint.
	tb.waitUntil("the chain verified, with a checkpoint", `document.querySelector(".chain-status .verified-to") && /last checkpoint #\d+ signed/.test(document.querySelector(".chain-status").textContent)`)
	code, verify := apitest.Call(t, "GET", s.url+"/api/audit/verify", rita, "")
	if code != 200 || verify["intact"] != true {
		t.Fatalf("verify = %d %v", code, verify)
	}
	head := fmt.Sprint(verify["head"].(map[string]any)["seq"])
	tb.waitUntil("the chain verified to the head", `document.querySelector(".chain-status .verified-to")?.textContent === `+js("#"+head))

	// Paging: more records than a page, read with the API's cursor.
	code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, `{"title":"many calls"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	for range 25 { // two records each: a page and more
		if code, body := apitest.Call(t, "POST", s.url+"/api/assistant/runs/"+run["runId"].(string)+"/messages?wait=30s", alice, `{"content":"call notes_list {}"}`); code != 200 {
			t.Fatalf("turn = %d %v", code, body)
		}
	}
	code, firstPage := apitest.Call(t, "GET", s.url+"/api/audit?order=desc&limit=50", rita, "")
	if code != 200 || firstPage["next"] == nil {
		t.Fatalf("the first page = %d, %d records, want a full page and next", code, len(firstPage["records"].([]any)))
	}
	wantAll := apiSeqs("order=desc&limit=50")
	wantAll = append(wantAll, apiSeqs("cursor="+firstPage["next"].(string))...)
	tb.click(`.review-filters button.subtle`) // Clear
	tb.waitUntil("the first page", `location.search === "" && document.querySelectorAll(".audit-table tbody tr").length === 50`)
	tb.click(`.records + .button`)
	tb.waitUntil("the older records", fmt.Sprintf(`document.querySelectorAll(".audit-table tbody tr").length === %d`, len(wantAll)))
	var all []string
	for _, r := range rows() {
		all = append(all, r.Seq)
	}
	if !slices.Equal(all, wantAll) {
		t.Errorf("paged, the log shows %v; the API's two pages hold %v", all, wantAll)
	}
	if !evaluate[bool](tb, `document.activeElement?.matches(".audit-table tbody tr:nth-child(51) a")`) {
		t.Errorf("the focus is not on the first older record")
	}

	// A record's detail, with its hashes.
	evaluate[bool](tb, `(document.querySelector("#review-title").focus(), true)`)
	first := rows()[0].Seq
	tb.tabTo(`.audit-table tbody tr[data-seq="` + first + `"] a`)
	tb.do(pressEnter)
	tb.waitUntil("the record", `location.pathname === "/review/audit/`+first+`" && document.querySelector(".record-chain")`)
	code, rec := apitest.Call(t, "GET", s.url+"/api/audit/"+first, rita, "")
	if code != 200 {
		t.Fatalf("GET /api/audit/%s = %d %v", first, code, rec)
	}
	facts := evaluate[[]string](tb, `[...document.querySelectorAll(".record-chain dd")].map((d) => d.textContent)`)
	if want := []string{first, rec["hash"].(string), rec["prev_hash"].(string)}; !slices.Equal(facts, want) {
		t.Errorf("the record shows %q, want seq, hash and previous hash %q", facts, want)
	}
	checkAxeReview(t, tb, "an audit record")

	// The policy: its statements and the matrix, with finance's column.
	tb.tabTo(`.review-nav a[href="/review/policy"]`)
	tb.do(pressEnter)
	tb.waitUntil("the policy and its matrix", `location.pathname === "/review/policy" && document.querySelector(".matrix-table")`)
	ids := evaluate[[]string](tb, `[...document.querySelectorAll(".statement-card")].map((c) => c.dataset.statement)`)
	if want := []string{"allow-notes-list", "finance-approves-writes", "deny-notes-delete"}; !slices.Equal(ids, want) {
		t.Errorf("statements %v, want %v", ids, want)
	}
	if got := tb.text(`.statement-card[data-statement="finance-approves-writes"] .facts`); !strings.Contains(got, "finance") || !strings.Contains(got, "a note written is kept") {
		t.Errorf("finance-approves-writes shows %q", got)
	}
	type cell struct{ Tool, Lock, NoGroup, Finance string }
	matrix := evaluate[[]cell](tb, `[...document.querySelectorAll(".matrix-table tbody tr")].map((r) => ({
		Tool: r.dataset.tool, Lock: r.cells[1].textContent, NoGroup: r.cells[2].dataset.decision, Finance: r.cells[3]?.dataset.decision || "" }))`)
	headers := evaluate[[]string](tb, `[...document.querySelectorAll(".matrix-table thead th")].map((c) => c.textContent)`)
	if !slices.Equal(headers, []string{"Tool", "Lock", "No group", "In finance"}) {
		t.Errorf("matrix columns %q", headers)
	}
	want := map[string]cell{
		"notes_list":    {"notes_list", "locked", "allow", "allow"},
		"notes_write":   {"notes_write", "locked", "approve", "approve"},
		"notes_delete":  {"notes_delete", "locked", "deny", "deny"},
		"sessions_list": {"sessions_list", "changed", "approve", "approve"},
	}
	for _, c := range matrix {
		if w, ok := want[c.Tool]; ok && c != w {
			t.Errorf("matrix row %+v, want %+v", c, w)
		}
		delete(want, c.Tool)
	}
	if len(want) > 0 {
		t.Errorf("the matrix lacks %v", want)
	}
	tb.tabTo(`.matrix .table-wrap`)
	checkAxeReview(t, tb, "the policy")

	// The tool lock: the changed tool, with both hashes and its definition.
	tb.tabTo(`.review-nav a[href="/review/tools"]`)
	tb.do(pressEnter)
	tb.waitUntil("the tool lock", `location.pathname === "/review/tools" && document.querySelector(".tool-lock-card")`)
	if first := evaluate[string](tb, `document.querySelector(".tool-lock-card").dataset.tool`); first != "sessions_list" {
		t.Errorf("the first tool is %s, want the changed sessions_list", first)
	}
	changedCard := evaluate[string](tb, `document.querySelector('.tool-lock-card[data-lock-state="changed"]').textContent`)
	code, tools := apitest.Call(t, "GET", s.url+"/api/tools", rita, "")
	if code != 200 {
		t.Fatalf("GET /api/tools = %d %v", code, tools)
	}
	var current struct{ Hash, Description string }
	for _, o := range tools["offers"].([]any) {
		if o := o.(map[string]any); o["name"] == "sessions_list" {
			current.Hash = o["definition_hash"].(string)
			current.Description = o["definition"].(map[string]any)["description"].(string)
			if o["locked_hash"] == current.Hash {
				t.Fatalf("sessions_list is not changed: %v", o)
			}
			if !strings.Contains(changedCard, o["locked_hash"].(string)) || !strings.Contains(changedCard, current.Hash) || !strings.Contains(changedCard, "Changed since reviewed") {
				t.Errorf("the changed tool's card does not show both hashes (%v): %q", o, changedCard)
			}
		}
	}
	// The diff: the description reviewed removed, the current one added,
	// and the rest of the definition unchanged.
	diff := evaluate[[]string](tb, `[...document.querySelectorAll('.tool-lock-card[data-lock-state="changed"] .diff span')].map((l) => l.className + " " + l.textContent)`)
	wantDel := `diff-del −   "description": ` + js(reviewedDescription) + `,`
	wantIns := `diff-ins +   "description": ` + js(current.Description) + `,`
	var dels, inss []string
	for _, l := range diff {
		if strings.HasPrefix(l, "diff-del") {
			dels = append(dels, l)
		}
		if strings.HasPrefix(l, "diff-ins") {
			inss = append(inss, l)
		}
	}
	at := slices.Index(diff, wantDel)
	if !slices.Equal(dels, []string{wantDel}) || !slices.Equal(inss, []string{wantIns}) || at < 0 || at+1 >= len(diff) || diff[at+1] != wantIns ||
		!slices.Contains(diff, `diff-same     "name": "sessions_list",`) {
		t.Errorf("the changed tool's diff:\n%s\nwant the one line %q followed by %q", strings.Join(diff, "\n"), wantDel, wantIns)
	}
	checkAxeReview(t, tb, "the tool lock")

	// Every approval of the tenant: alice's, which rita did not ask for
	// and may not decide.
	tb.tabTo(`.review-nav a[href="/review/approvals"]`)
	tb.do(pressEnter)
	tb.waitUntil("alice's approval", `location.pathname === "/review/approvals" && document.querySelector(`+js(`.approval-card[data-approval="`+approvalID+`"]`)+`)`)
	if evaluate[bool](tb, `Boolean(document.querySelector(".review .approval-card button[value=approve]"))`) {
		t.Errorf("a reviewer who is no approver is offered Approve")
	}
	tb.tabTo("#approvals-status")
	tb.do(chromedp.SetValue(chromedp.CSS("#approvals-status"), "denied"))
	tb.tabTo(`.review-filters button[type=submit]`)
	tb.do(pressEnter)
	tb.waitUntil("no denied approval", `document.querySelector(".review .empty-state")?.textContent === "No approval matches." && !document.querySelector(".review .approval-card")`)
	tb.do(chromedp.SetValue(chromedp.CSS("#approvals-status"), "pending"))
	tb.click(`.review-filters button[type=submit]`)
	tb.waitUntil("the pending approvals", `document.querySelectorAll(".review .approval-card.is-pending").length === 2`)
	checkAxeReview(t, tb, "every approval")

	// A record edited in the database: the chain's status says where it
	// breaks.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(s.dataDir, "usher.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `UPDATE audit_log SET tool = 'notes_delete' WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	tb.click(`.review-nav a[href="/review"]`)
	tb.waitUntil("the chain broken at #3", `document.querySelector(".chain-status.broken")?.textContent.includes("The chain is broken at #3 (#3 edited")`)
	tb.checkClean()
}

// TestBrowserReviewTimesAndMoreApprovals filters the audit log by time, as
// a reviewer sets since and until in the form, and pages every approval of
// the tenant with "Show more approvals": what the page shows is what the
// API answers for the same query, the window leaves out records on either
// side, and the second page of approvals follows the first, focused.
func TestBrowserReviewTimesAndMoreApprovals(t *testing.T) {
	t.Parallel()
	s := reviewServer(t)
	rita, err := s.cli(t, "token", "user", "--sub", "rita", "--group", "security")
	if err != nil {
		t.Fatal(err)
	}
	// 25 pending approvals (a page of 20 and more), five people's five
	// runs each, as many as a person may have active.
	for u := range 5 {
		tok := userToken(t, s, fmt.Sprintf("writer-%d", u))
		for n := range 5 {
			alicesCall(t, s, tok, "notes_write", fmt.Sprintf(`{"name":"note-%d-%d","body":"b"}`, u, n))
		}
	}
	type record struct {
		Seq string
		At  string
	}
	apiRecords := func(query string) []record {
		t.Helper()
		var out []record
		for _, r := range auditRecords(t, s, rita, query) {
			out = append(out, record{fmt.Sprint(r["seq"]), r["at"].(string)})
		}
		return out
	}
	all := apiRecords("limit=1000")
	if len(all) < 50 {
		t.Fatalf("%d records, want a call's two records and more for each of 25 calls", len(all))
	}
	// The window: from a record a third of the way through the log to one
	// two thirds of the way, to the millisecond (until is exclusive), so
	// that records fall outside it on both sides.
	at := func(r record) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, r.At)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	since := at(all[len(all)/3]).Truncate(time.Millisecond)
	var until time.Time
	for _, r := range all[2*len(all)/3:] {
		if u := at(r).Truncate(time.Millisecond); u.After(since) {
			until = u
			break
		}
	}
	if until.IsZero() {
		t.Fatalf("the records from #%s on were all written in one millisecond: no window", all[len(all)/3].Seq)
	}
	iso := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") } // as the page's toISOString
	want := apiRecords("since=" + iso(since) + "&until=" + iso(until) + "&order=desc&limit=50")
	var wantSeqs []string
	for _, r := range want {
		if at(r).Before(since) || !at(r).Before(until) {
			t.Errorf("the API's window holds record %s at %s, outside [%s, %s)", r.Seq, r.At, iso(since), iso(until))
		}
		wantSeqs = append(wantSeqs, r.Seq)
	}
	if len(want) == 0 || want[len(want)-1].Seq == all[0].Seq || want[0].Seq == all[len(all)-1].Seq {
		t.Fatalf("the API's window [%s, %s) holds %v: want some records, not the first nor the last", iso(since), iso(until), want)
	}

	tb := startBrowser(t)
	tb.signInWith(s.url, "rita", "security")
	tb.do(chromedp.Navigate(s.url + "/review"))
	tb.waitUntil("the audit log", `document.querySelector(".audit-table tbody tr")`)
	// The form's inputs take the browser's local time, to the millisecond.
	setLocal := func(sel string, v time.Time) {
		t.Helper()
		evaluate[bool](tb, `(() => { const d = new Date(`+js(iso(v))+`); const p = (n) => String(n).padStart(2, "0");
			const el = document.querySelector(`+js(sel)+`);
			el.value = d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + "T" + p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds()) + "." + String(d.getMilliseconds()).padStart(3, "0");
			return el.value !== ""; })()`)
	}
	setLocal("#filter-since", since)
	setLocal("#filter-until", until)
	tb.tabTo(".review-filters button[type=submit]")
	tb.do(pressEnter)
	params := `new URLSearchParams(location.search)`
	tb.waitUntil("the window in the address", params+`.get("since") === `+js(iso(since))+` && `+params+`.get("until") === `+js(iso(until)))
	wantJSON, _ := json.Marshal(wantSeqs) // as JSON.stringify writes it
	tb.waitUntil("the records of the window, as the API lists them", params+`.get("since") === `+js(iso(since))+
		` && `+params+`.get("until") === `+js(iso(until))+
		` && JSON.stringify([...document.querySelectorAll(".audit-table tbody tr")].map((r) => r.dataset.seq)) === `+js(string(wantJSON)))
	// The window's address, opened afresh, fills the form with its times
	// and shows the same records.
	tb.do(chromedp.Navigate(s.url + "/review?since=" + iso(since) + "&until=" + iso(until)))
	tb.waitUntil("the window again, its times in the form", `new Date(document.querySelector("#filter-since").value).toISOString() === `+js(iso(since))+
		` && new Date(document.querySelector("#filter-until").value).toISOString() === `+js(iso(until))+
		` && JSON.stringify([...document.querySelectorAll(".audit-table tbody tr")].map((r) => r.dataset.seq)) === `+js(string(wantJSON)))
	// A window after the last record holds none.
	after := at(all[len(all)-1]).Truncate(time.Millisecond).Add(time.Millisecond)
	setLocal("#filter-since", after)
	evaluate[bool](tb, `(document.querySelector("#filter-until").value = "", true)`)
	tb.tabTo(".review-filters button[type=submit]")
	tb.do(pressEnter)
	tb.waitUntil("no record after the last", params+`.get("since") === `+js(iso(after))+` && !`+params+`.has("until")`+
		` && document.querySelector(".records .empty-state")?.textContent === "No record matches these filters."`)
	if rs := apiRecords("since=" + iso(after)); len(rs) != 0 {
		t.Errorf("after the last record the API lists %v", rs)
	}

	// Every approval of the tenant: a page of 20, then the rest.
	approvalIDs := func(query string) ([]string, string) {
		t.Helper()
		code, page := apitest.Call(t, "GET", s.url+"/api/approvals?"+query, rita, "")
		if code != 200 {
			t.Fatalf("GET /api/approvals?%s = %d %v", query, code, page)
		}
		var ids []string
		for _, a := range page["approvals"].([]any) {
			ids = append(ids, a.(map[string]any)["id"].(string))
		}
		next, _ := page["next_cursor"].(string)
		return ids, next
	}
	firstIDs, next := approvalIDs("scope=all&limit=20")
	if len(firstIDs) != 20 || next == "" {
		t.Fatalf("the first page of approvals holds %d, next %q: want 20 and more", len(firstIDs), next)
	}
	restIDs, last := approvalIDs("scope=all&limit=20&cursor=" + next)
	if len(restIDs) != 5 || last != "" {
		t.Fatalf("the second page of approvals holds %d, next %q: want the other 5 and no more", len(restIDs), last)
	}
	tb.do(chromedp.Navigate(s.url + "/review/approvals"))
	tb.waitUntil("a page of approvals and the button for more", `document.querySelectorAll(".review .approval-card").length === 20 && !document.querySelector(".review .approval-list + .button").hidden`)
	cards := func() []string {
		return evaluate[[]string](tb, `[...document.querySelectorAll(".review .approval-card")].map((c) => c.dataset.approval)`)
	}
	if got := cards(); !slices.Equal(got, firstIDs) {
		t.Errorf("the first page shows %v; the API lists %v", got, firstIDs)
	}
	tb.tabTo(".review .approval-list + .button")
	if label := tb.text(".review .approval-list + .button"); label != "Show more approvals" {
		t.Errorf("the button says %q", label)
	}
	tb.do(pressEnter)
	tb.waitUntil("every approval, the button gone", `document.querySelectorAll(".review .approval-card").length === 25 && document.querySelector(".review .approval-list + .button").hidden`)
	if got := cards(); !slices.Equal(got, append(slices.Clone(firstIDs), restIDs...)) {
		t.Errorf("after Show more the list shows %v; the API's pages list %v then %v", got, firstIDs, restIDs)
	}
	if !evaluate[bool](tb, `document.activeElement?.matches(".review .approval-card:nth-child(21) .approval-title")`) {
		t.Errorf("the focus is not on the first approval of the second page")
	}
	checkAxeReview(t, tb, "every approval, two pages")
	tb.checkClean()
}
