package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
)

// axePath is axe-core, which the end-to-end tests' npm packages pin
// (e2e/package.json; `make e2e-deps` installs them).
const axePath = "../node_modules/axe-core/axe.min.js"

// axeFinding is one violation axe reports: its rule, impact, and the
// elements it found.
type axeFinding struct {
	ID      string   `json:"id"`
	Impact  string   `json:"impact"`
	Help    string   `json:"help"`
	Targets []string `json:"targets"`
}

// checkAxe runs axe-core on the page as it is and fails on any moderate,
// serious or critical violation, naming the screen.
func checkAxe(t *testing.T, tb *tab, screen string) {
	t.Helper()
	findings, ok := axeFindings(t, tb, screen)
	if !ok {
		return
	}
	for _, f := range findings {
		if f.Impact == "moderate" || f.Impact == "serious" || f.Impact == "critical" {
			t.Errorf("%s: axe %s (%s): %s — %s", screen, f.ID, f.Impact, f.Help, strings.Join(f.Targets, "; "))
		}
	}
}

// axeFindings runs axe-core on the page and returns its violations. axe
// is loaded through the DevTools protocol, as the page's own scripts are
// not: the page's CSP allows no other script. Without axe-core installed
// it reports false — except under CI, which installs it and must never
// skip the check silently.
func axeFindings(t *testing.T, tb *tab, screen string) ([]axeFinding, bool) {
	t.Helper()
	src, err := os.ReadFile(axePath)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("axe-core is not installed (%v): run make e2e-deps", err)
		}
		t.Logf("axe-core is not installed (%v): the accessibility check of %s skips", err, screen)
		return nil, false
	}
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](string(src)+";true", chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("%s: loading axe-core: %v", screen, err)
	}
	return evaluate[[]axeFinding](tb, `axe.run(document, { resultTypes: ["violations"] }).then((r) =>
		r.violations.map((v) => ({ id: v.id, impact: v.impact || "", help: v.help, targets: v.nodes.map((n) => n.target.join(" ")) })))`), true
}

// TestBrowserAxeSelfCheck: the check sees what it is there for — an image
// without a text alternative is a critical violation.
func TestBrowserAxeSelfCheck(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	tb := startBrowser(t)
	tb.do(chromedp.Navigate(s.url + "/"))
	tb.waitUntil("the sign-in page", `document.querySelector("main.signin a.button.primary")`)
	checkAxe(t, tb, "the sign-in page")
	evaluate[bool](tb, `(document.querySelector("main").append(Object.assign(document.createElement("img"), { src: "/static/favicon.svg" })), true)`)
	findings, ok := axeFindings(t, tb, "the self-check")
	if !ok {
		return
	}
	found := false
	for _, f := range findings {
		found = found || (f.ID == "image-alt" && f.Impact == "critical")
	}
	if !found {
		t.Errorf("axe found %+v on a page with an image without alt, want image-alt", findings)
	}
}

// axeVariant is a size and a theme the main screens are checked in.
type axeVariant struct {
	name          string
	width, height int
	mobile        bool
	scheme        string // prefers-color-scheme: the page follows the system's by default
}

var axeVariants = []axeVariant{
	{"1280×800, light", 1280, 800, false, "light"},
	{"1280×800, dark", 1280, 800, false, "dark"},
	{"390×844, light", 390, 844, true, "light"},
	{"390×844, dark", 390, 844, true, "dark"},
}

// checkAxeVariants runs checkAxe on the screen at each of axeVariants,
// then leaves the tab at 1280×800 in light mode.
func checkAxeVariants(t *testing.T, tb *tab, screen string) {
	t.Helper()
	background := map[string]string{} // by scheme: the page follows it
	for _, v := range axeVariants {
		tb.setVariant(v)
		background[v.scheme] = evaluate[string](tb, `getComputedStyle(document.body).backgroundColor`)
		checkAxe(t, tb, screen+" at "+v.name)
	}
	if background["light"] == background["dark"] {
		t.Errorf("%s: the same background in the light and the dark theme (%s)", screen, background["light"])
	}
	tb.setVariant(axeVariants[0])
}

// setVariant sizes the tab and sets the system's colour scheme, and waits
// until the page follows both and has painted.
func (tb *tab) setVariant(v axeVariant) {
	tb.t.Helper()
	if v.mobile {
		tb.do(chromedp.EmulateViewport(int64(v.width), int64(v.height), chromedp.EmulateMobile))
	} else {
		tb.do(chromedp.EmulateViewport(int64(v.width), int64(v.height)))
	}
	call(tb, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v.scheme}},
	})
	tb.waitUntil("the page at "+v.name, fmt.Sprintf(`innerWidth === %d && matchMedia("(prefers-color-scheme: %s)").matches`, v.width, v.scheme))
	evaluate[bool](tb, `new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => resolve(true))))`)
}

// TestBrowserAxeSizesAndThemes runs axe-core on the main screens — the
// sign-in page, the home screen (and its drawer at a phone's width), a
// conversation with a highlighted code block and an approval waiting, and
// the approvals inbox — at 1280×800 and at 390×844, each in the light
// and the dark theme, failing on any
// moderate, serious or critical violation.
func TestBrowserAxeSizesAndThemes(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	tb := startBrowser(t)
	tb.do(chromedp.Navigate(s.url + "/"))
	tb.waitUntil("the sign-in page", `document.querySelector("main.signin a.button.primary")`)
	checkAxeVariants(t, tb, "the sign-in page")

	tb.signIn(s.url, "grace")
	tb.waitUntil("the home screen", `document.querySelector("#home-title")`)
	checkAxeVariants(t, tb, "the home screen")
	// At a phone's width the sidebar is a drawer, over a backdrop.
	for _, v := range axeVariants[2:] {
		tb.setVariant(v)
		tb.click("button.sidebar-toggle")
		tb.waitUntil("the drawer open", `document.body.classList.contains("sidebar-open") && document.querySelector("#sidebar").getBoundingClientRect().left >= 0`)
		checkAxe(t, tb, "the home screen's drawer at "+v.name)
		tb.do(chromedp.KeyEvent(kb.Escape))
		tb.waitUntil("the drawer closed", `!document.body.classList.contains("sidebar-open")`)
	}
	tb.setVariant(axeVariants[0])

	ms.Reply("Here is a small program that lists your notes, newest first:\n\n```go\n" + screenshotCode + "\n```\n\nRun it with `go run .` in the module's directory.")
	tb.send("How do I list my notes in Go, newest first?")
	tb.waitUntil("the highlighted code", `document.querySelector("article.msg-assistant .code-block code.hljs .hljs-keyword")`)
	tb.waitBadge("Active")
	ms.ReplyToolCalls(model.ToolCall{ID: "call-save", Name: "notes_write",
		Arguments: json.RawMessage(`{"name":"list-notes.go","body":"package main — lists the notes, newest first"}`)})
	tb.send("Save it as a note called list-notes.go")
	approve := `.tool-card[data-status=approval_pending] .approval-card.is-pending button[value=approve]`
	tb.waitUntil("the approval in view", `(() => {
		const b = document.querySelector(`+js(approve)+`);
		if (!b) return false;
		const r = b.getBoundingClientRect(), s = document.querySelector(".messages").getBoundingClientRect();
		return r.top >= s.top && r.bottom <= s.bottom;
	})()`)
	tb.waitBadge("Awaiting approval")
	checkAxeVariants(t, tb, "a conversation with code and an approval")

	tb.click(`a.inbox-link`)
	tb.waitUntil("the inbox", `document.querySelector("#inbox-title") && document.querySelector(".inbox .approval-card.is-pending button[value=approve]")`)
	checkAxeVariants(t, tb, "the approvals inbox")
	tb.checkClean()
}

// screenshotCode is the code block of the README's screenshot.
const screenshotCode = `func main() {
	notes, err := usher.Notes(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	slices.SortFunc(notes, func(a, b Note) int { return b.Updated.Compare(a.Updated) })
	for _, n := range notes {
		fmt.Println(n.Name)
	}
}`

// takeScreenshot takes the README's screenshot of the conversation shown:
// light mode, 1280×800 (screenshotWidth, screenshotHeight), from the
// question down to the start of the approval's card, whose Approve and
// Deny are below or in view: the approval bar pinned above the message
// box offers them. No focus ring.
func takeScreenshot(t *testing.T, tb *tab) {
	t.Helper()
	tb.do(chromedp.EmulateViewport(screenshotWidth, screenshotHeight))
	tb.waitUntil("the screenshot's size", fmt.Sprintf(`innerWidth === %d`, screenshotWidth))
	evaluate[bool](tb, `(() => {
		document.activeElement.blur();
		const scroller = document.querySelector(".messages");
		const question = document.querySelector("article.msg-user");
		scroller.scrollTop += question.getBoundingClientRect().top - scroller.getBoundingClientRect().top - 12;
		return true;
	})()`)
	tb.waitUntil("the approval bar", barShown)
	evaluate[bool](tb, `new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => resolve(true))))`)
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	cancel()
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.TempDir(), "screenshot-conversation.png")
	if os.Getenv(updateScreenshot) == "1" {
		shot = screenshotPath
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the conversation view: %s", shot)
	tb.do(chromedp.EmulateViewport(1280, 800))
}
