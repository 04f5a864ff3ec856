package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
)

// The browser tests drive the Sessions UI in a real headless Chromium, the
// way a person would: the development provider's sign-in form, the
// composer, the Approve button, a reload, Sign out. They watch the page for
// what must never happen — an uncaught exception, a console error, a
// Content-Security-Policy violation, a JavaScript dialog (the sign of
// injected script) — and fail on any.

// Bounds of the browser tests: one action, one awaited condition.
const (
	browserStartTimeout = 30 * time.Second
	actionTimeout       = 15 * time.Second
	conditionTimeout    = 20 * time.Second
)

// The screenshot of the conversation view in the README, written by
// TestBrowserAxeSizesAndThemes when USHER_UPDATE_SCREENSHOT=1.
const (
	screenshotPath   = "../../docs/screenshot-conversation.png"
	updateScreenshot = "USHER_UPDATE_SCREENSHOT"
	screenshotWidth  = 1280
	screenshotHeight = 800
)

// tab is one browser tab and what its watchers saw.
type tab struct {
	t    *testing.T
	name string
	ctx  context.Context

	mu       sync.Mutex
	problems []string // exceptions, console errors and warnings, CSP violations
	csp      []string // the CSP violations among them
	dialogs  []string // JavaScript dialogs that opened
	tolerate []string // substrings of browser log entries expected from now on
	sse      []pageSSE
	requests []string // "METHOD URL" of each request the page sent
	sseMark  int      // where watchStreaming began
}

// sent counts the page's requests so far of method and path.
func (tb *tab) sent(method, path string) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	n := 0
	for _, r := range tb.requests {
		m, u, _ := strings.Cut(r, " ")
		if p, err := url.Parse(u); err == nil && m == method && p.Path == path {
			n++
		}
	}
	return n
}

// pageSSE is one message an EventSource of the page received.
type pageSSE struct{ name, data string }

// startBrowser opens a tab for the test, stopped when the test ends, in a
// browser context of its own (cookies, storage, cache and permissions
// apart, as in a fresh profile) of the Chromium the tests share, or — with
// flags added to its command line — in a Chromium of its own. Without
// Chromium the test skips — except under CI, where it fails: CI installs
// Chromium and must never skip these silently.
func startBrowser(t *testing.T, flags ...chromedp.ExecAllocatorOption) *tab {
	t.Helper()
	chromium := testenv.Chromium(t)
	tb := &tab{t: t, name: "tab 1"}
	opts := []chromedp.ContextOption{chromedp.WithListener(tb.listen)}
	var parent context.Context
	if len(flags) == 0 {
		parent = shared.browser(t, chromium)
		opts = append(opts, chromedp.WithNewBrowserContext())
	} else {
		allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromiumOptions(chromium), flags...)...)
		t.Cleanup(cancelAlloc) // (after the tab's cleanup: they run last to first)
		parent = allocCtx
	}
	ctx, cancel := chromedp.NewContext(parent, opts...)
	tb.ctx = ctx
	// Closing the tab disposes of its browser context, or stops its own
	// Chromium: before the servers the test started earlier stop.
	t.Cleanup(cancel)
	tb.open()
	return tb
}

// chromiumOptions is the command line of every Chromium the tests start.
func chromiumOptions(chromium string) []chromedp.ExecAllocatorOption {
	return append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Headless,
		chromedp.WindowSize(1280, 800),
	)
}

// shared is the Chromium the tests share. Starting and stopping a Chromium
// for each test took about a second and a half of each, and a busy
// machine's CPU; a browser context per test keeps them as independent.
var shared sharedBrowser

// sharedBrowser is a Chromium started by the first test that needs it and
// stopped by TestMain once every test has run.
type sharedBrowser struct {
	once sync.Once
	ctx  context.Context // the browser's first tab, the parent of the tests' tabs
	stop func()
	err  error
}

// browser returns the shared browser's first context, starting the browser
// if no test did yet; the test fails if it cannot start (every test, if
// the first could not). A Chromium that does not come up is stopped and
// started once more: on a busy machine a first start has been seen to hang
// past its bound where the next came up at once.
func (b *sharedBrowser) browser(t *testing.T, chromium string) context.Context {
	t.Helper()
	b.once.Do(func() {
		for attempt := 1; ; attempt++ {
			b.err = b.start(chromium)
			if b.err == nil || attempt == browserStarts {
				return
			}
			t.Logf("the shared browser, start %d of %d: %v", attempt, browserStarts, b.err)
			b.stop()
		}
	})
	if b.err != nil {
		t.Fatalf("the shared browser: %v", b.err)
	}
	return b.ctx
}

// browserStarts is how many times the shared browser is started before the
// tests that need it fail.
const browserStarts = 2

// start starts a Chromium as the shared browser, and waits (bounded) for
// its first tab.
func (b *sharedBrowser) start(chromium string) error {
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromiumOptions(chromium)...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b.ctx = ctx
	b.stop = func() {
		cancel()
		cancelAlloc()
	}
	// As for a tab (open): no deadline on the first action, which binds
	// the browser's life to its context; the wait is bounded.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			return fmt.Errorf("starting Chromium: %w", err)
		}
		return nil
	case <-time.After(browserStartTimeout):
		return fmt.Errorf("not started within %s", browserStartTimeout)
	}
}

// close stops the shared browser, if a test started it, and waits until
// it has exited.
func (b *sharedBrowser) close() {
	b.once.Do(func() {}) // none can start it from now on
	if b.stop != nil {
		b.stop()
	}
}

// open opens the tab — and starts the browser, for the first — in light
// mode. The first action on a context binds the tab's life to the context
// it is given, which therefore must not carry a deadline: the wait is
// bounded here instead.
func (tb *tab) open() {
	tb.t.Helper()
	opened := make(chan error, 1)
	go func() { opened <- chromedp.Do(tb.ctx) }()
	select {
	case err := <-opened:
		if err != nil {
			tb.t.Fatalf("%s: opening the tab (and Chromium): %v", tb.name, err)
		}
	case <-time.After(browserStartTimeout):
		tb.t.Fatalf("%s: the tab (and Chromium) did not open within %s", tb.name, browserStartTimeout)
	}
	// What the watchers saw after the last check fails the test too, also
	// when it stops early.
	tb.t.Cleanup(tb.checkClean)
	tb.lightMode()
}

// newTab opens another tab in the same browser: the same cookies, so the
// same signed-in person.
func (tb *tab) newTab(name string) *tab {
	tb.t.Helper()
	other := &tab{t: tb.t, name: name}
	ctx, cancel := chromedp.NewContext(tb.ctx, chromedp.WithListener(other.listen))
	other.ctx = ctx
	tb.t.Cleanup(cancel)
	other.open()
	return other
}

// browserContext is the tab's browser context, which the commands of the
// Browser domain (permissions, downloads) must name: without it they apply
// to the browser's default context, not the test's.
func (tb *tab) browserContext() cdp.BrowserContextID {
	return chromedp.FromContext(tb.ctx).BrowserContextID
}

// lightMode makes the page follow a system in light mode.
func (tb *tab) lightMode() {
	tb.t.Helper()
	call(tb, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}},
	})
}

// listen runs in the tab's event loop: it records and returns at once.
func (tb *tab) listen(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		tb.record(fmt.Sprintf("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, text), false)
	case *runtime.EventConsoleAPICalled:
		switch ev.Type {
		case runtime.ConsoleAPICalledTypeError, runtime.ConsoleAPICalledTypeWarning, runtime.ConsoleAPICalledTypeAssert:
			var args []string
			for _, a := range ev.Args {
				if a.Description != "" {
					args = append(args, a.Description)
				} else {
					args = append(args, string(a.Value))
				}
			}
			tb.record(fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")), false)
		}
	case *log.EventEntryAdded:
		e := ev.Entry
		csp := strings.Contains(e.Text, "Content Security Policy")
		if csp || e.Level == log.EntryLevelError || e.Level == log.EntryLevelWarning {
			tb.record(fmt.Sprintf("browser log (%s, %s) %s: %s", e.Source, e.Level, e.URL, e.Text), csp)
		}
	case *network.EventRequestWillBeSent:
		if ev.Request != nil {
			tb.mu.Lock()
			tb.requests = append(tb.requests, ev.Request.Method+" "+ev.Request.URL)
			tb.mu.Unlock()
		}
	case *network.EventEventSourceMessageReceived:
		tb.mu.Lock()
		tb.sse = append(tb.sse, pageSSE{ev.EventName, ev.Data})
		tb.mu.Unlock()
	case *page.EventJavascriptDialogOpening:
		tb.mu.Lock()
		tb.dialogs = append(tb.dialogs, fmt.Sprintf("%s dialog %q on %s", ev.Type, ev.Message, ev.URL))
		tb.mu.Unlock()
		// A dialog blocks the page: dismiss it, outside this loop.
		go func() {
			ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
			defer cancel()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}()
	}
}

func (tb *tab) record(problem string, csp bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if csp {
		tb.csp = append(tb.csp, problem)
	}
	for _, s := range tb.tolerate {
		if strings.Contains(problem, s) {
			return
		}
	}
	tb.problems = append(tb.problems, problem)
}

// expectLog tolerates browser log entries containing s from now on.
func (tb *tab) expectLog(s string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.tolerate = append(tb.tolerate, s)
}

// checkClean fails the test for every problem and dialog seen so far.
func (tb *tab) checkClean() {
	tb.t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, p := range tb.problems {
		tb.t.Errorf("%s: %s", tb.name, p)
	}
	for _, d := range tb.dialogs {
		tb.t.Errorf("%s: a JavaScript dialog opened — injected script ran: %s", tb.name, d)
	}
	tb.problems, tb.dialogs = nil, nil
}

// do runs actions, each bounded.
func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	for _, a := range actions {
		ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
		err := chromedp.Do(ctx, a)
		cancel()
		if err != nil {
			tb.t.Fatalf("%s: %v\n%s", tb.name, err, tb.describe())
		}
	}
}

// call sends one protocol command to the tab.
func call[P, R any](tb *tab, cmd cdp.Command[P, R], params P) R {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	r, err := chromedp.Call(ctx, cmd, params)
	if err != nil {
		tb.t.Fatalf("%s: %s: %v", tb.name, cmd.Method, err)
	}
	return r
}

// evaluate returns the value of a JavaScript expression in the page (a
// promise is awaited).
func evaluate[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := tryEvaluate[T](tb, expr)
	if err != nil {
		tb.t.Fatalf("%s: evaluating %s: %v\n%s", tb.name, expr, err, tb.describe())
	}
	return v
}

func tryEvaluate[T any](tb *tab, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// waitUntil polls a JavaScript condition until it holds. It evaluates from
// the outside (chromedp's Poll compiles its predicate with new Function,
// which the page's CSP rightly refuses), and rides over navigations.
func (tb *tab) waitUntil(what, cond string) {
	tb.t.Helper()
	deadline := time.Now().Add(conditionTimeout)
	var lastErr error
	for {
		ok, err := tryEvaluate[bool](tb, "Boolean("+cond+")")
		if err == nil && ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("%s: not within %s: %s (last error: %v)\n%s", tb.name, conditionTimeout, what, lastErr, tb.describe())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// describe tells where the tab is and what it shows, for a failure.
func (tb *tab) describe() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 3*time.Second)
	defer cancel()
	// innerText holds no field's value: the fields follow, by label.
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText.slice(0, 3000) : "(no body)") +
		[...document.querySelectorAll("textarea, input:not([type=hidden])")].map((f) =>
			"\nfield " + (f.labels?.[0]?.textContent || f.getAttribute("aria-label") || f.name || f.id) + ": " + JSON.stringify(f.value.slice(0, 200))).join("")`))
	if err != nil {
		return fmt.Sprintf("(the page could not be read: %v)", err)
	}
	return "the page at " + s
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// click clicks the first element matching sel with the mouse.
func (tb *tab) click(sel string) {
	tb.t.Helper()
	for attempt := 0; ; attempt++ {
		tb.waitUntil(sel+" is on the page", "document.querySelector("+js(sel)+")")
		ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		// The page may render the element anew between finding it and
		// clicking it (a live update): find it again.
		if err != nil && attempt < 3 && strings.Contains(err.Error(), "Could not find node") {
			continue
		}
		if err != nil {
			tb.t.Fatalf("%s: clicking %s: %v\n%s", tb.name, sel, err, tb.describe())
		}
		return
	}
}

// typeText types text into the field sel, key by key.
func (tb *tab) typeText(sel, text string) {
	tb.t.Helper()
	tb.waitUntil(sel+" is on the page", "document.querySelector("+js(sel)+")")
	tb.do(chromedp.SendKeys(chromedp.CSS(sel), text))
}

// pasteText puts text into the field sel at once, as a paste or an input
// method does (one input event): for a long text whose typing is not what
// the test is about. Typed, each character is three key events, each a
// round trip to the page: a paragraph takes seconds on a busy machine.
func (tb *tab) pasteText(sel, text string) {
	tb.t.Helper()
	tb.waitUntil(sel+" is on the page", "document.querySelector("+js(sel)+")")
	tb.do(chromedp.Focus(chromedp.CSS(sel)))
	call(tb, input.InsertText, input.InsertTextParams{Text: text})
}

// text returns the textContent of the first element matching sel, or "".
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	return evaluate[string](tb, `(document.querySelector(`+js(sel)+`) || {}).textContent || ""`)
}

// signIn signs in through the development provider's form, from the
// signed-out page.
func (tb *tab) signIn(base, user string) {
	tb.t.Helper()
	tb.do(chromedp.Navigate(base + "/"))
	tb.click(`main.signin a.button.primary[href^="/auth/login"]`)
	tb.waitUntil("the development provider's form", `location.pathname.startsWith("/dev/oidc/") && document.querySelector("#username")`)
	tb.typeText("#username", user)
	tb.click(`form button[type=submit]`)
	tb.waitUntil("signed in as "+user, `location.origin === `+js(base)+` && document.querySelector(".topbar .user-name")?.textContent === `+js(user))
}

// Selectors of the conversation view.
const (
	composerInput  = `#main .composer textarea`
	composerSend   = `#main .composer button[type=submit]`
	runBadge       = `.conversation-title .badge`
	liveConnection = `.conversation-title .connection.live`
)

// send types a message into the composer, sends it with Enter and waits
// until it went.
func (tb *tab) send(text string) {
	tb.t.Helper()
	tb.trySend(text)
	tb.waitUntil("the message was sent", `document.querySelector(`+js(composerInput)+`)?.value === ""`)
}

// sendPasted is send with the message pasted (pasteText), not typed.
func (tb *tab) sendPasted(text string) {
	tb.t.Helper()
	tb.waitUntil("the composer is ready", `document.querySelector(`+js(composerSend)+`) && !document.querySelector(`+js(composerSend)+`).disabled`)
	tb.pasteText(composerInput, text)
	tb.do(pressEnter)
	tb.waitUntil("the message was sent", `document.querySelector(`+js(composerInput)+`)?.value === ""`)
}

// trySend types a message into the composer and presses Enter.
func (tb *tab) trySend(text string) {
	tb.t.Helper()
	tb.waitUntil("the composer is ready", `document.querySelector(`+js(composerSend)+`) && !document.querySelector(`+js(composerSend)+`).disabled`)
	tb.typeText(composerInput, text)
	tb.do(pressEnter)
}

// pressEnter presses Enter as a keyboard does: a keyDown that carries the
// text "\r", then a keyUp. chromedp.KeyEvent(kb.Enter) sends the character
// as an event of its own, after the keyDown, which types a new line even
// when the page handled the keyDown (the composer sends, and prevents the
// default): the line lands in the box after it was cleared whenever the
// page's answer comes first, as it does on a busy machine.
var pressEnter = enterKey(0)

// enterKey is pressEnter with the modifiers held (kb.ModifierCtrl…).
func enterKey(modifiers int64) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		return pressEnterWith(ctx, t, modifiers)
	})
}

func pressEnterWith(ctx context.Context, t *chromedp.Target, modifiers int64) error {
	key := input.DispatchKeyEventParams{Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13, Modifiers: modifiers}
	down, up := key, key
	down.Type, down.Text, down.UnmodifiedText = input.DispatchKeyEventTypeKeyDown, "\r", "\r"
	up.Type = input.DispatchKeyEventTypeKeyUp
	for _, k := range []input.DispatchKeyEventParams{down, up} {
		if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, k); err != nil {
			return err
		}
	}
	return nil
}

// startSession sends text from the new-session view and returns the run
// it opened, once the page shows its conversation.
func (tb *tab) startSession(text string) string {
	tb.t.Helper()
	tb.waitUntil("the new-session view", `document.querySelector("#home-title")`)
	tb.send(text)
	tb.waitUntil("the conversation of the new run", `/^\/runs\/[^/]+$/.test(location.pathname)`)
	return tb.runID()
}

// runID is the run of the conversation shown.
func (tb *tab) runID() string {
	tb.t.Helper()
	p := evaluate[string](tb, "location.pathname")
	id, ok := strings.CutPrefix(p, "/runs/")
	if !ok {
		tb.t.Fatalf("%s: not a conversation: %s", tb.name, p)
	}
	id, _ = url.PathUnescape(id)
	return id
}

// waitBadge waits until the run's status badge reads label.
func (tb *tab) waitBadge(label string) {
	tb.t.Helper()
	tb.waitUntil("the run's status is "+label, `document.querySelector(`+js(runBadge)+`)?.textContent === `+js(label))
}

// watchStreaming records, from now on, the messages of the page's live
// streams and every streamed draft added to the conversation, with the
// text its live region was given.
func (tb *tab) watchStreaming() {
	tb.t.Helper()
	tb.mu.Lock()
	tb.sseMark = len(tb.sse)
	tb.mu.Unlock()
	evaluate[bool](tb, `(() => {
		window.__drafts = [];
		new MutationObserver((records) => {
			for (const r of records) for (const n of r.addedNodes) {
				if (n.nodeType === 1 && n.matches("article.streaming")) window.__drafts.push(n);
			}
		}).observe(document.querySelector(".message-list"), { childList: true });
		return true;
	})()`)
}

// streamed returns the texts of the drafts seen since watchStreaming.
func (tb *tab) streamed() []string {
	tb.t.Helper()
	return evaluate[[]string](tb, `(window.__drafts || []).map((n) => n.querySelector("[aria-live]").textContent)`)
}

// checkStreamed checks the reply of the turn since watchStreaming: its
// text reached the page as deltas over the run's stream; the page showed
// it as a draft, replaced by the committed reply — unless the delta came
// only after the turn's end (deltas and events travel apart), when the page
// must not show it at all — and no draft is left.
func checkStreamed(t *testing.T, tb *tab) {
	t.Helper()
	tb.mu.Lock()
	msgs := slices.Clone(tb.sse[tb.sseMark:])
	tb.mu.Unlock()
	delta, reply, end := -1, -1, -1
	var streamed, committed string
	for i, m := range msgs {
		switch {
		case m.name == "delta" && delta < 0:
			var d struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal([]byte(m.data), &d)
			delta, streamed = i, d.Text
		case m.name == "message.assistant" && reply < 0:
			var ev struct {
				Data struct {
					Content string `json:"content"`
				} `json:"data"`
			}
			_ = json.Unmarshal([]byte(m.data), &ev)
			if ev.Data.Content != "" {
				reply, committed = i, ev.Data.Content
			}
		case m.name == "agent.turn.end" && end < 0:
			end = i
		}
	}
	switch {
	case delta < 0 || streamed == "":
		t.Errorf("%s: no streamed text reached the page: %q", tb.name, msgs)
	case reply < 0 || end < 0:
		t.Errorf("%s: the turn's reply and end did not reach the page: %q", tb.name, msgs)
	case !strings.HasPrefix(committed, streamed):
		t.Errorf("%s: the streamed text %q is not the start of the committed reply %q", tb.name, streamed, committed)
	case delta < reply:
		drafts := tb.streamed()
		if len(drafts) == 0 || !strings.HasPrefix(squash(committed), squash(drafts[0])) || drafts[0] == "" {
			t.Errorf("%s: the streamed text %q was not shown as it came: drafts %q", tb.name, streamed, drafts)
		}
	case delta > end:
		t.Logf("%s: the streamed text came after its turn's end, and was rightly not shown", tb.name)
	}
	for _, m := range tb.shown() {
		if strings.Contains(m.Class, "streaming") {
			t.Errorf("%s: a streamed draft is still shown: %+v", tb.name, m)
		}
	}
}

// shownMessage is one item of the conversation as the page shows it.
type shownMessage struct {
	Seq   int64       `json:"seq"`
	Class string      `json:"class"`
	Text  string      `json:"text"`
	Calls []shownCall `json:"calls"`
}

type shownCall struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// shown reads the conversation off the page.
func (tb *tab) shown() []shownMessage {
	tb.t.Helper()
	return evaluate[[]shownMessage](tb, `[...document.querySelectorAll(".message-list > *")].map((el) => ({
		seq: Number(el.dataset.seq || 0),
		class: el.className,
		text: (el.querySelector(".msg-body") || {}).textContent || "",
		calls: [...el.querySelectorAll(".tool-card")].map((c) => ({ id: c.dataset.call || "", status: c.dataset.status || "" })),
	}))`)
}

// apiMessages returns the run's messages through the API, in order.
func apiMessages(t *testing.T, s *server, token, runID string) []map[string]any {
	t.Helper()
	var all []map[string]any
	after := int64(0)
	for {
		code, body := apitest.Call(t, "GET", fmt.Sprintf("%s/api/assistant/runs/%s/messages?take=50&after=%d", s.url, runID, after), token, "")
		if code != 200 {
			t.Fatalf("messages = %d %v", code, body)
		}
		page, _ := body["messages"].([]any)
		for _, m := range page {
			all = append(all, m.(map[string]any))
			after = int64(m.(map[string]any)["seq"].(float64))
		}
		if more, _ := body["hasMore"].(bool); !more || len(page) == 0 {
			return all
		}
	}
}

// markdownLink is a Markdown link, of which the page shows the text.
var markdownLink = regexp.MustCompile(`\[([^\]]*)\]\((?:[^()]|\([^()]*\))*\)`)

// squash drops all whitespace, so that texts compare across Markdown's
// line handling.
func squash(s string) string { return strings.Join(strings.Fields(s), "") }

// checkShownMatchesAPI checks that the page shows exactly the run's
// messages, in order, none twice: every user and assistant message as one
// article with its text, every tool call as one card whose status is its
// latest result's, and no streamed draft left over.
func checkShownMatchesAPI(t *testing.T, tb *tab, s *server, token, runID string) {
	t.Helper()
	msgs := apiMessages(t, s, token, runID)
	var wantSeqs []int64
	wantText := map[int64]string{}
	wantCalls := map[string]string{} // tool call id -> its latest result's status
	var callOrder []string
	for _, m := range msgs {
		seq := int64(m["seq"].(float64))
		data, _ := m["data"].(map[string]any)
		switch m["type"] {
		case "message.user":
			wantSeqs = append(wantSeqs, seq)
			wantText[seq], _ = data["content"].(string)
		case "message.assistant":
			wantSeqs = append(wantSeqs, seq)
			content, _ := data["content"].(string)
			wantText[seq] = markdownLink.ReplaceAllString(content, "$1")
			calls, _ := data["toolCalls"].([]any)
			for _, c := range calls {
				id := c.(map[string]any)["id"].(string)
				wantCalls[id] = ""
				callOrder = append(callOrder, id)
			}
		case "message.tool":
			id, _ := data["toolCallId"].(string)
			wantCalls[id], _ = data["status"].(string)
		default:
			t.Fatalf("unknown message type in %v", m)
		}
	}
	shown := tb.shown()
	var gotSeqs []int64
	var gotCalls []string
	for _, m := range shown {
		if strings.Contains(m.Class, "streaming") {
			t.Errorf("%s: a streamed draft is still shown after the turn: %+v", tb.name, m)
			continue
		}
		if strings.Contains(m.Class, "context-note") {
			continue // the mark where a summary stands in for the model: no message
		}
		if strings.Contains(m.Class, "deleted-note") {
			continue // the mark where a deleted message was: no message
		}
		if strings.Contains(m.Class, "turn-note") {
			continue // how a turn ended (failed, stopped): no message
		}
		if !strings.Contains(m.Class, "msg") {
			t.Errorf("%s: unexpected item in the conversation: %+v", tb.name, m)
			continue
		}
		gotSeqs = append(gotSeqs, m.Seq)
		if squash(m.Text) != squash(wantText[m.Seq]) {
			t.Errorf("%s: message %d shows %q, the API has %q", tb.name, m.Seq, m.Text, wantText[m.Seq])
		}
		for _, c := range m.Calls {
			gotCalls = append(gotCalls, c.ID)
			if want, ok := wantCalls[c.ID]; !ok || c.Status != want {
				t.Errorf("%s: tool card %s has status %q, the API's latest result %q", tb.name, c.ID, c.Status, want)
			}
		}
	}
	if !slices.Equal(gotSeqs, wantSeqs) {
		t.Errorf("%s: the page shows messages %v, the API has %v", tb.name, gotSeqs, wantSeqs)
	}
	if !slices.Equal(gotCalls, callOrder) {
		t.Errorf("%s: the page shows tool cards %v, the API has calls %v", tb.name, gotCalls, callOrder)
	}
}

// injectedMarkup is what checkNoMarkupFrom looks for.
type injectedMarkup struct {
	Images   []string `json:"images"`
	Scripts  []string `json:"scripts"`
	Handlers []string `json:"handlers"`
	Links    []string `json:"links"`
}

// checkNoMarkupFrom checks that none of the page's elements came from
// injected text: no image but the brand's, no script but the app's, no
// event-handler attribute, no javascript: link.
func checkNoMarkupFrom(t *testing.T, tb *tab) {
	t.Helper()
	found := evaluate[injectedMarkup](tb, `({
		images: [...document.querySelectorAll("img")].map((e) => e.getAttribute("src")),
		scripts: [...document.querySelectorAll("script")].map((e) => e.getAttribute("src") || "inline: " + e.textContent),
		handlers: [...document.querySelectorAll("*")].flatMap((e) => [...e.attributes].filter((a) => a.name.startsWith("on")).map((a) => e.tagName + " " + a.name)),
		links: [...document.querySelectorAll("a[href]")].map((e) => e.href).filter((h) => !/^https?:/.test(h)),
	})`)
	if len(found.Images) != 1 || !regexp.MustCompile(`^/static/v/[0-9a-f]{12}/favicon\.svg$`).MatchString(found.Images[0]) {
		t.Errorf("%s: images on the page: %q, want only the brand's", tb.name, found.Images)
	}
	if len(found.Scripts) != 1 || !regexp.MustCompile(`^/static/v/[0-9a-f]{12}/js/app\.js$`).MatchString(found.Scripts[0]) {
		t.Errorf("%s: scripts on the page: %q, want only the app's", tb.name, found.Scripts)
	}
	if len(found.Handlers) != 0 {
		t.Errorf("%s: event-handler attributes on the page: %q", tb.name, found.Handlers)
	}
	if len(found.Links) != 0 {
		t.Errorf("%s: links that are not http(s): %q", tb.name, found.Links)
	}
}

// TestBrowserTabsApart: the tests share a Chromium, not a person. Another
// test's tab, on the same server, is signed out and sees none of the
// first's cookies and storage; a second tab of the same test is the same
// person.
func TestBrowserTabsApart(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	first := startBrowser(t)
	first.signIn(s.url, "alice")
	evaluate[bool](first, `(localStorage.setItem("apart", "alice's"), true)`)
	same := first.newTab("tab 2")
	same.do(chromedp.Navigate(s.url + "/"))
	same.waitUntil("signed in as alice", `document.querySelector(".topbar .user-name")?.textContent === "alice"`)

	other := startBrowser(t)
	other.name = "another test's tab"
	other.do(chromedp.Navigate(s.url + "/"))
	other.waitUntil("the signed-out page", `document.querySelector("main.signin a.button.primary")`)
	if signedIn := evaluate[bool](other, `fetch("/auth/session").then((r) => r.json()).then((s) => s.signedIn)`); signedIn {
		t.Error("another test's tab is signed in")
	}
	if got := evaluate[string](other, `String(localStorage.getItem("apart"))`); got != "null" {
		t.Errorf("another test's tab reads the first's storage: %q", got)
	}
	if cookies := call(other, network.GetCookies, network.GetCookiesParams{URLs: []string{s.url + "/"}}).Cookies; len(cookies) != 0 {
		t.Errorf("another test's tab has %d cookies of the server, want none", len(cookies))
	}
	first.checkClean()
	same.checkClean()
	other.checkClean()
}

// TestBrowserConversation walks the Sessions UI as a new user of the
// embedded default would: the security headers and the signed-out page,
// sign-in through the development provider, a new session, a streamed
// reply, an approval approved in the page and the tool's result, a reload,
// script injection through a message, a tool result and a title, a phone's
// width, and sign-out — after which the API refuses the old page.
func TestBrowserConversation(t *testing.T) {
	t.Parallel()
	began := time.Now()
	s := startServer(t, nil)
	alice := userToken(t, s, "alice")

	// Two sessions made through the API, so the sidebar has company.
	for _, r := range []struct{ title, message string }{{"Weekly planning", "call notes_list"}, {"Release notes for 0.4", "tools"}} {
		code, run := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, fmt.Sprintf(`{"title":%s}`, js(r.title)))
		if code != 201 {
			t.Fatalf("create = %d %v", code, run)
		}
		base := s.url + "/api/assistant/runs/" + run["runId"].(string)
		if code, body := apitest.Call(t, "POST", base+"/messages?wait=30s", alice, fmt.Sprintf(`{"content":%s}`, js(r.message))); code != 200 {
			t.Fatalf("turn = %d %v", code, body)
		}
		if r.title == "Weekly planning" {
			if code, body := apitest.Call(t, "POST", base+"/complete", alice, ""); code != 200 {
				t.Fatalf("complete = %d %v", code, body)
			}
		}
	}

	tb := startBrowser(t)

	// The page and its headers: a CSP without unsafe-inline that forbids
	// framing; the signed-out page offers sign-in.
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(s.url+"/"))
	cancel()
	if err != nil {
		t.Fatalf("opening %s: %v", s.url, err)
	}
	header := func(name string) string {
		for k, v := range resp.Headers {
			if strings.EqualFold(k, name) {
				return fmt.Sprint(v)
			}
		}
		return ""
	}
	csp := header("Content-Security-Policy")
	if resp.Status != 200 || !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") ||
		strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("GET / = %d with Content-Security-Policy %q", resp.Status, csp)
	}
	for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
		if got := header(name); got != want {
			t.Errorf("GET / has %s %q, want %q", name, got, want)
		}
	}
	tb.waitUntil("the sign-in page", `document.querySelector("main.signin a.button.primary")?.textContent === "Sign in"`)

	// The watchers see what they are there for: an inline script is
	// refused by the CSP, reported as a violation; a dialog is seen.
	if ran := evaluate[bool](tb, `(() => {
		const s = document.createElement("script");
		s.textContent = "window.__inlineRan = true";
		document.head.append(s);
		s.remove();
		setTimeout(() => alert("self-check"));
		return window.__inlineRan === true;
	})()`); ran {
		t.Error("an inline script ran: the CSP does not hold")
	}
	testenv.WaitFor(t, conditionTimeout, func() bool {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		return len(tb.csp) == 1 && len(tb.dialogs) == 1
	})
	tb.mu.Lock()
	if len(tb.problems) != 1 || tb.problems[0] != tb.csp[0] {
		t.Errorf("the self-check's problems = %q, want the CSP violation alone", tb.problems)
	}
	tb.problems, tb.csp, tb.dialogs = nil, nil, nil
	tb.mu.Unlock()

	// Sign in through the development provider.
	tb.signIn(s.url, "alice")
	tb.waitUntil("the sidebar lists the sessions made through the API",
		`[...document.querySelectorAll(".session-list .session-title")].map((e) => e.textContent).join("|") === "Release notes for 0.4|Weekly planning"`)

	// A new session: the first message creates the run.
	runA := tb.startSession("Hello! What can you do?")
	tb.waitUntil("the demo model's reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes("I am Usher's demo model"))`)
	tb.waitBadge("Active")
	if got := tb.text(".session-item[aria-current=page] .session-title"); got != "Hello! What can you do?" {
		t.Errorf("the new session's title in the sidebar = %q", got)
	}

	// A tool that runs unattended: its card, and the model's reply streamed
	// while it is written, then committed in its place.
	tb.waitUntil("the run's live stream", `document.querySelector(`+js(liveConnection)+`)`)
	tb.watchStreaming()
	tb.send("call notes_list")
	tb.waitUntil("the model's summary of the list", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.startsWith("The tool notes_list returned"))`)
	tb.waitBadge("Active")
	checkStreamed(t, tb)
	// The size of the context the turn sent, in the header, as the API
	// has it.
	if code, body := apitest.Call(t, "GET", s.url+"/api/assistant/runs/"+runA, alice, ""); code != 200 {
		t.Fatalf("GET the run = %d %v", code, body)
	} else if c, ok := body["run"].(map[string]any)["context"].(map[string]any); !ok || c["limit"] != 80000.0 {
		t.Errorf("the run's context = %v, want one of the default limit", body["run"])
	} else {
		percent := fmt.Sprint(math.Round(100 * c["tokens"].(float64) / c["limit"].(float64)))
		if percent == "0" && c["tokens"].(float64) > 0 {
			percent = "<1"
		}
		tb.waitUntil("the context use in the header", `document.querySelector(".conversation-title .context-use")?.textContent === `+js("context: "+percent+"% of 80k"))
	}

	// A call that needs an approval: the card appears in the page, with the
	// exact arguments; Approve; the run resumes, the tool runs, and its
	// result and the model's streamed summary appear.
	tb.watchStreaming()
	tb.send(`call notes_write {"name":"groceries","body":"milk, eggs, bread"}`)
	pending := `.tool-card[data-status=approval_pending] .approval-card.is-pending`
	tb.waitUntil("the approval card", `document.querySelector(`+js(pending+` button[value=approve]`)+`)`)
	checkAxe(t, tb, "a conversation with an approval")
	tb.waitBadge("Awaiting approval")
	tb.waitUntil("the approvals inbox counts it", `document.querySelector(".inbox-link .count")?.textContent === "1"`)
	// Its name holds what it shows (no aria-label that hides the count).
	if name := evaluate[string](tb, `document.querySelector(".inbox-link").textContent`); name != "Approvals1 waiting" ||
		evaluate[bool](tb, `document.querySelector(".inbox-link").hasAttribute("aria-label")`) {
		t.Errorf("the inbox link's text = %q, want the count in it", name)
	}
	if n := evaluate[int](tb, `document.querySelectorAll("h1").length`); n != 1 {
		t.Errorf("the page has %d h1 headings, want 1", n)
	}
	if args := tb.text(pending + " pre.arguments"); squash(args) != squash(`{"body": "milk, eggs, bread", "name": "groceries"}`) {
		t.Errorf("the approval shows the arguments %q", args)
	}
	if tool := tb.text(pending + " .approval-title code"); tool != "notes_write" {
		t.Errorf("the approval card's tool = %q", tool)
	}
	tb.typeText(pending+" form.decision textarea", "Looks right")
	tb.click(pending + " button[value=approve]")
	tb.waitUntil("the tool's result", `document.querySelector('.tool-card[data-status=succeeded] .tool-result')`)
	tb.waitUntil("the approval shows as approved and used", `document.querySelector(".tool-card .approval-card .approval-head .badge")?.textContent === "Approved and used"`)
	tb.waitUntil("the model's summary of the result", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.startsWith("The tool notes_write returned"))`)
	tb.waitBadge("Active")
	tb.waitUntil("the inbox is empty", `document.querySelector(".inbox-link .count").hidden`)
	if note := tb.text(".tool-card .approval-card .decision-note"); !strings.Contains(note, "Looks right") {
		t.Errorf("the decision note = %q, want the reason", note)
	}
	checkStreamed(t, tb)
	checkShownMatchesAPI(t, tb, s, alice, runA)

	// A reload shows the same conversation: nothing lost, nothing doubled.
	tb.do(chromedp.Reload())
	tb.waitUntil("the conversation after the reload", `document.querySelector(`+js(liveConnection)+`) && document.querySelectorAll("article.msg").length > 0`)
	checkShownMatchesAPI(t, tb, s, alice, runA)
	tb.checkClean()

	// Script injection, shown as text: in a message (and the title made of
	// it, and the model's echo of it)...
	const (
		inMessage = `<img src=x onerror=alert(1)><script>alert(2)</script>`
		inLink    = `[click me](javascript:alert(3))`
		inTool    = `<img src=x onerror=alert(4)>`
		inTitle   = `<img src=x onerror=alert(5)><script>alert(6)</script>`
	)
	tb.click("a.new-session")
	tb.waitUntil("the new-session view", `document.querySelector("#home-title")`)
	tb.send(inMessage)
	tb.waitUntil("the conversation of the new run", `/^\/runs\/[^/]+$/.test(location.pathname) && location.pathname !== `+js("/runs/"+runA))
	runB := tb.runID()
	tb.waitUntil("the demo model's echo", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes("You wrote"))`)
	tb.waitBadge("Active")
	if got := tb.text("article.msg-user .msg-body"); got != inMessage {
		t.Errorf("the message shows %q, want the text %q", got, inMessage)
	}
	if got := tb.text("article.msg-assistant .msg-body"); !strings.Contains(got, inMessage) {
		t.Errorf("the model's echo shows %q, want it to contain the text %q", got, inMessage)
	}
	if got := tb.text("#conversation-title"); got != inMessage {
		t.Errorf("the title made of the message shows %q", got)
	}
	// ...in Markdown, as a javascript: link...
	tb.waitUntil("the run's live stream", `document.querySelector(`+js(liveConnection)+`)`)
	tb.send(inLink)
	// (Markdown makes links of http and https URLs only: this one is text.)
	tb.waitUntil("the model's echo of the link", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes('You wrote: "click me"'))`)
	tb.waitBadge("Active")
	if n := evaluate[int](tb, `document.querySelectorAll(".message-list a").length`); n != 0 {
		t.Errorf("%d links in the conversation, want none", n)
	}
	// ...in a tool's result (written after an approval decided through the
	// API, which the page follows live)...
	tb.send(`call notes_write {"name":"xss","body":"` + inTool + `"}`)
	tb.waitUntil("the approval card", `document.querySelector(`+js(pending)+`)`)
	if args := tb.text(pending + " pre.arguments"); !strings.Contains(args, inTool) {
		t.Errorf("the approval's arguments show %q, want the text %q", args, inTool)
	}
	approvalID := evaluate[string](tb, `document.querySelector(`+js(pending)+`).dataset.approval`)
	if code, body := apitest.Call(t, "POST", s.url+"/api/approvals/"+approvalID+"/decision", alice, `{"decision":"approve"}`); code != 200 {
		t.Fatalf("decision = %d %v", code, body)
	}
	tb.waitUntil("the approval decided elsewhere shows as approved", `document.querySelector('.tool-card[data-status=succeeded] .approval-card .approval-head .badge')?.textContent.startsWith("Approved")`)
	tb.waitBadge("Active")
	tb.send(`call notes_read {"name":"xss"}`)
	tb.waitUntil("the note read back", `[...document.querySelectorAll(".tool-card[data-status=succeeded] .tool-result")].some((e) => e.textContent.includes(`+js(inTool)+`))`)
	// (The model quotes the tool's JSON text, where Go escaped < and >.)
	tb.waitUntil("the model's summary of the note", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.startsWith("The tool notes_read returned"))`)
	tb.waitBadge("Active")
	checkShownMatchesAPI(t, tb, s, alice, runB)
	checkNoMarkupFrom(t, tb)

	// ...and in a title set through the API, in the sidebar and the view.
	code, runC := apitest.Call(t, "POST", s.url+"/api/assistant/runs", alice, fmt.Sprintf(`{"title":%s}`, js(inTitle)))
	if code != 201 {
		t.Fatalf("create = %d %v", code, runC)
	}
	item := `.session-list a[href="/runs/` + runC["runId"].(string) + `"]`
	tb.waitUntil("the new session in the sidebar", `document.querySelector(`+js(item)+`)`)
	if got := tb.text(item + " .session-title"); got != inTitle {
		t.Errorf("the sidebar shows the title %q, want the text %q", got, inTitle)
	}
	tb.click(item)
	tb.waitUntil("the titled session", `document.querySelector("#conversation-title")?.textContent === `+js(inTitle))
	if got := evaluate[string](tb, "document.title"); got != inTitle+" · Usher" {
		t.Errorf("document.title = %q", got)
	}
	checkNoMarkupFrom(t, tb)
	tb.checkClean()

	// A phone's width: the conversation fits (no sideways scrolling, even
	// with every card and its ids open), the sidebar is a drawer, and a
	// message goes and its answer comes.
	tb.do(chromedp.EmulateViewport(360, 740, chromedp.EmulateMobile), chromedp.Navigate(s.url+"/runs/"+runA))
	tb.waitUntil("the conversation at 360 px", `document.querySelector(`+js(liveConnection)+`) && innerWidth === 360`)
	fits := func(what string) {
		t.Helper()
		type width struct {
			Page     int `json:"page"`
			Viewport int `json:"viewport"`
			List     int `json:"list"`
			ListView int `json:"listView"`
		}
		w := evaluate[width](tb, `({
			page: document.documentElement.scrollWidth, viewport: innerWidth,
			list: document.querySelector(".messages").scrollWidth, listView: document.querySelector(".messages").clientWidth,
		})`)
		if w.Page > w.Viewport || w.List > w.ListView {
			t.Errorf("at 360 px, %s: the page is %d px wide in a %d px viewport; the messages %d px in %d px", what, w.Page, w.Viewport, w.List, w.ListView)
		}
	}
	fits("as loaded")
	evaluate[bool](tb, `(document.querySelectorAll("details").forEach((d) => { d.open = true; }), true)`)
	fits("with every card open")
	if evaluate[bool](tb, `document.querySelector("#sidebar").getBoundingClientRect().right > 0`) {
		t.Error("at 360 px the sidebar is in view before it is opened")
	}
	tb.click("button.sidebar-toggle")
	tb.waitUntil("the drawer opens", `document.body.classList.contains("sidebar-open") && document.querySelector("#sidebar").getBoundingClientRect().left >= 0`)
	tb.do(chromedp.KeyEvent(kb.Escape))
	tb.waitUntil("Escape closes the drawer", `!document.body.classList.contains("sidebar-open")`)
	if !evaluate[bool](tb, `(() => { const r = document.querySelector(`+js(composerInput)+`).getBoundingClientRect(); return r.left >= 0 && r.right <= innerWidth && r.bottom <= innerHeight && r.width > 200; })()`) {
		t.Error("at 360 px the composer is not in view")
	}
	before := len(tb.shown())
	tb.send("call notes_list")
	tb.waitUntil("the answer at 360 px", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.startsWith("The tool notes_list returned"))`)
	tb.waitBadge("Active")
	if after := len(tb.shown()); after != before+3 {
		t.Errorf("at 360 px: %d items after a tool turn, want %d", after, before+3)
	}
	fits("after a turn")
	tb.do(chromedp.EmulateViewport(1280, 800))
	tb.checkClean()

	// Sign out. Another tab of the same session stays open; afterwards the
	// API refuses its requests and it shows the sign-in page.
	other := tb.newTab("tab 2")
	other.do(chromedp.Navigate(s.url + "/runs/" + runA))
	other.waitUntil("the conversation in the second tab", `document.querySelectorAll("article.msg").length > 0 && document.querySelector(`+js(composerInput)+`)`)
	count := len(apiMessages(t, s, alice, runA))
	tb.click(".topbar .user button")
	tb.waitUntil("the sign-in page after signing out", `document.querySelector("main.signin a.button.primary")?.textContent === "Sign in"`)
	// The signed-out browser's requests are refused (the 401s are logged).
	tb.expectLog("status of 401")
	other.expectLog("status of 401")
	if code := evaluate[int](tb, `fetch("/api/assistant/runs").then((r) => r.status)`); code != 401 {
		t.Errorf("the API after signing out = %d, want 401", code)
	}
	if signedIn := evaluate[bool](tb, `fetch("/auth/session").then((r) => r.json()).then((s) => s.signedIn)`); signedIn {
		t.Error("/auth/session says signed in after signing out")
	}
	other.trySend("are you still there?")
	other.waitUntil("the old page shows the sign-in page", `document.querySelector("main.signin .notice")?.textContent.includes("Your session ended")`)
	if n := len(apiMessages(t, s, alice, runA)); n != count {
		t.Errorf("the signed-out page's message was stored: %d messages, were %d", n, count)
	}
	tb.checkClean()
	other.checkClean()
	t.Logf("browser conversation test: %s", time.Since(began).Round(time.Millisecond))
}

// TestBrowserReloadMidTurn reloads the page while a turn is running — the
// scripted model holds its reply — and releases it: the reloaded page shows
// the rest of the turn live, and ends up with exactly the run's messages,
// in order, nothing lost or doubled.
func TestBrowserReloadMidTurn(t *testing.T) {
	t.Parallel()
	began := time.Now()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	bob := userToken(t, s, "bob")
	tb := startBrowser(t)
	tb.signIn(s.url, "bob")

	ms.Reply("Hello, Bob. I am the scripted model.")
	runID := tb.startSession("hello")
	tb.waitUntil("the first reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes("scripted model"))`)
	tb.waitBadge("Active")

	// The next turn calls a tool and then answers; the model holds its
	// first step until released.
	release := ms.Hold()
	defer release()
	ms.ReplyToolCalls(model.ToolCall{ID: "call-list-1", Name: "notes_list", Arguments: json.RawMessage(`{}`)})
	ms.Reply("You have no notes yet. Write one with notes_write.")
	tb.waitUntil("the run's live stream", `document.querySelector(`+js(liveConnection)+`)`)
	tb.send("list my notes")
	ctx, cancel := context.WithTimeout(t.Context(), conditionTimeout)
	defer cancel()
	if err := ms.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	tb.waitBadge("Working")

	tb.do(chromedp.Reload())
	tb.waitUntil("the conversation after the reload", `document.querySelector(`+js(liveConnection)+`) && document.querySelectorAll("article.msg-user").length === 2`)
	tb.waitBadge("Working")
	if !evaluate[bool](tb, `!document.querySelector(".messages .working").hidden`) {
		t.Error("after the reload the page does not show that Usher is working")
	}
	if err := ms.WaitHeld(ctx, 1); err != nil {
		t.Fatalf("the reload disturbed the turn: %v", err)
	}
	tb.watchStreaming()
	release()

	tb.waitUntil("the rest of the turn", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes("You have no notes yet"))`)
	tb.waitBadge("Active")
	tb.waitUntil("the tool's result", `document.querySelector('.tool-card[data-call="call-list-1"][data-status=succeeded]')`)
	checkStreamed(t, tb)
	checkShownMatchesAPI(t, tb, s, bob, runID)
	if msgs := apiMessages(t, s, bob, runID); len(msgs) != 6 {
		t.Errorf("the run has %d messages, want 6 (two user messages, three assistant, one tool result)", len(msgs))
	}

	// And once more, at rest.
	tb.do(chromedp.Reload())
	tb.waitUntil("the conversation after the second reload", `document.querySelector(`+js(liveConnection)+`) && document.querySelectorAll("article.msg").length > 0`)
	checkShownMatchesAPI(t, tb, s, bob, runID)

	// A send answered after its whole turn has been shown live: the browser
	// holds the answer to the POST until the stream has brought the reply
	// and the turn's end. The answer's run, read before all that, is older
	// than what the page shows: it must not turn the page back to Working.
	ms.Reply("A quick answer.")
	tb.mu.Lock()
	mark := len(tb.sse)
	tb.mu.Unlock()
	pausedCtx, cancelPaused := context.WithTimeout(tb.ctx, conditionTimeout)
	defer cancelPaused()
	paused := chromedp.Events(pausedCtx, fetch.RequestPaused)
	call(tb, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: "*/api/assistant/runs/*/messages", RequestStage: fetch.RequestStageResponse},
	}})
	tb.trySend("a quick question")
	var held fetch.EventRequestPaused
	for ev, err := range paused {
		if err != nil {
			t.Fatalf("waiting for the send to be held: %v", err)
		}
		held = ev
		break
	}
	if held.Request == nil || held.Request.Method != "POST" || held.ResponseStatusCode != 202 {
		t.Fatalf("held %+v, want the answer to the message's POST", held)
	}
	tb.waitUntil("the reply, live, before the send is answered", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent === "A quick answer.")`)
	tb.waitBadge("Active")
	// The sidebar's feed has told the page the run's final state too: no
	// later news can mend what the answer might spoil.
	testenv.WaitFor(t, conditionTimeout, func() bool {
		if apitest.Run(t, s.url, bob, runID)["working"] != false {
			return false
		}
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for _, m := range tb.sse[mark:] {
			var run struct {
				RunID   string `json:"runId"`
				Working *bool  `json:"working"`
			}
			if m.name == "run" && json.Unmarshal([]byte(m.data), &run) == nil && run.RunID == runID && run.Working != nil && !*run.Working {
				return true
			}
		}
		return false
	})
	call(tb, fetch.ContinueResponse, fetch.ContinueResponseParams{RequestID: held.RequestID})
	call(tb, fetch.Disable, cdp.Empty{})
	tb.waitUntil("the send is answered", `document.querySelector(`+js(composerInput)+`).value === ""`)
	if badge := tb.text(runBadge); badge != "Active" {
		t.Errorf("after a late answer to a send the run shows %q, want Active", badge)
	}
	if evaluate[bool](tb, `!document.querySelector(".messages .working").hidden`) {
		t.Error("after a late answer to a send the page shows that Usher is working")
	}
	checkShownMatchesAPI(t, tb, s, bob, runID)
	tb.checkClean()
	t.Logf("browser reload test: %s", time.Since(began).Round(time.Millisecond))
}
