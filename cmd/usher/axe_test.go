package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// axePath is axe-core, which the end-to-end tests' npm packages pin
// (e2e/package.json; `make e2e-deps` installs them).
const axePath = "../../e2e/node_modules/axe-core/axe.min.js"

// axeFinding is one violation axe reports: its rule, impact, and the
// elements it found.
type axeFinding struct {
	ID      string   `json:"id"`
	Impact  string   `json:"impact"`
	Help    string   `json:"help"`
	Targets []string `json:"targets"`
}

// checkAxe runs axe-core on the page as it is and fails on any serious or
// critical violation, naming the screen.
func checkAxe(t *testing.T, tb *tab, screen string) {
	t.Helper()
	findings, ok := axeFindings(t, tb, screen)
	if !ok {
		return
	}
	for _, f := range findings {
		if f.Impact == "serious" || f.Impact == "critical" {
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
