package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// browser is a headless Chromium with one tab.
type browser struct {
	ctx    context.Context
	cancel func()

	mu       sync.Mutex
	problems []string // uncaught exceptions and console errors
}

func startBrowser(chromium string, width, height int) (*browser, error) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Headless,
		chromedp.WindowSize(width, height),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(b.listen))
	b.ctx, b.cancel = ctx, func() { cancel(); cancelAlloc() }
	// The first action starts Chromium; it binds the tab to ctx, which
	// must carry no deadline, so the wait is bounded here.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			b.cancel()
			return nil, fmt.Errorf("start Chromium: %w", err)
		}
	case <-time.After(60 * time.Second):
		b.cancel()
		return nil, fmt.Errorf("chromium did not start within 60 s")
	}
	return b, nil
}

func (b *browser) listen(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		b.mu.Lock()
		b.problems = append(b.problems, "uncaught exception: "+ev.ExceptionDetails.Text)
		b.mu.Unlock()
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError {
			var args []string
			for _, a := range ev.Args {
				args = append(args, a.Description+string(a.Value))
			}
			b.mu.Lock()
			b.problems = append(b.problems, "console.error: "+strings.Join(args, " "))
			b.mu.Unlock()
		}
	}
}

// check reports what went wrong in the page so far.
func (b *browser) check() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		return fmt.Errorf("the page: %s", strings.Join(b.problems, "; "))
	}
	return nil
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) error {
	for _, a := range actions {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		err := chromedp.Do(ctx, a)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// eval returns the value of expr in the page, a promise awaited.
func eval[T any](b *browser, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// waitFor polls a condition in the page (across navigations).
func (b *browser) waitFor(what, cond string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := eval[bool](b, "Boolean("+cond+")")
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within 30 s: %s (%v)", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// signIn signs in as user through the development provider's form.
func (b *browser) signIn(base, user string) error {
	if err := b.do(chromedp.Navigate(base + "/")); err != nil {
		return err
	}
	login := `main.signin a.button.primary[href^="/auth/login"]`
	if err := b.waitFor("the sign-in page", `document.querySelector(`+jsString(login)+`)`); err != nil {
		return err
	}
	if err := b.do(chromedp.Click(chromedp.CSS(login))); err != nil {
		return err
	}
	if err := b.waitFor("the development provider's form", `document.querySelector("#username")`); err != nil {
		return err
	}
	if err := b.do(chromedp.SendKeys(chromedp.CSS("#username"), user), chromedp.Click(chromedp.CSS(`form button[type=submit]`))); err != nil {
		return err
	}
	return b.waitFor("signed in", `document.querySelector(".topbar .user-name")?.textContent === `+jsString(user))
}

// probe is added to every document the tab loads: from the start, each
// animation frame, it looks for the conversation's last message, and once
// it is in the message list's visible area it notes the time of the frame
// after (the one that painted it), from the navigation's start.
const probe = `(() => {
	const b = window.__bench = {};
	const look = () => {
		const el = document.querySelector('.message-list article[data-seq="%d"]');
		const s = document.querySelector('.messages');
		if (el && s) {
			const r = el.getBoundingClientRect(), v = s.getBoundingClientRect();
			if (r.height > 0 && r.bottom <= v.bottom + 1 && r.bottom > v.top) {
				b.inView = performance.now();
				requestAnimationFrame(() => { b.visible = performance.now(); });
				return;
			}
		}
		requestAnimationFrame(look);
	};
	requestAnimationFrame(look);
})()`

// loadResult is what one navigation measured, in ms from its start.
type loadResult struct {
	Visible  float64 `json:"visible"`  // the frame after the last message was in view
	HTML     float64 `json:"html"`     // the page's HTML answered
	RunRead  float64 `json:"runRead"`  // the conversation's first read (GET …/runs/{id}) answered
	Assets   float64 `json:"assets"`   // the page's scripts and styles loaded (DOMContentLoaded)
	Articles int     `json:"articles"` // messages on the page
	Nodes    int     `json:"nodes"`    // elements on the page
}

// load navigates to the conversation at u and waits until its last
// message is visible.
func (b *browser) load(u string, cold bool) (loadResult, error) {
	if err := b.do(chromedp.Navigate("about:blank")); err != nil {
		return loadResult{}, err
	}
	if cold {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		_, err := chromedp.Call(ctx, network.ClearBrowserCache, cdp.Empty{})
		cancel()
		if err != nil {
			return loadResult{}, err
		}
	}
	if err := b.do(chromedp.Navigate(u)); err != nil {
		return loadResult{}, err
	}
	if err := b.waitFor("the last message visible", `window.__bench && window.__bench.visible`); err != nil {
		return loadResult{}, err
	}
	return eval[loadResult](b, `(() => {
		const run = performance.getEntriesByType("resource").find((e) => /^\/api\/assistant\/runs\/[^/]+$/.test(new URL(e.name).pathname));
		const nav = performance.getEntriesByType("navigation")[0];
		return { visible: window.__bench.visible, html: nav.responseEnd, runRead: run ? run.responseEnd : -1, assets: nav.domContentLoadedEventEnd,
			articles: document.querySelectorAll(".message-list article.msg").length, nodes: document.getElementsByTagName("*").length };
	})()`)
}

// olderResult is what one scroll to the top measured.
type olderResult struct {
	Shown  float64 `json:"shown"`  // ms from the scroll to the frame after the older page was on the page
	Loaded int     `json:"loaded"` // messages it added
	Drift  float64 `json:"drift"`  // px the reader's place moved (0: kept)
}

// scrollUp scrolls the message list to its top and times the older page
// the page loads then.
func (b *browser) scrollUp() (olderResult, error) {
	return eval[olderResult](b, `new Promise((resolve, reject) => {
		const s = document.querySelector(".messages");
		const first = document.querySelector(".message-list article.msg[data-seq]");
		const count = () => document.querySelectorAll(".message-list article.msg").length;
		const before = count();
		const t0 = performance.now();
		s.scrollTop = 0;
		const top = first.getBoundingClientRect().top;
		const give = setTimeout(() => reject(new Error("no older page within 10 s")), 10000);
		const look = () => {
			if (document.querySelector(".message-list article.msg[data-seq]") !== first) {
				requestAnimationFrame(() => {
					clearTimeout(give);
					resolve({ shown: performance.now() - t0, loaded: count() - before, drift: first.getBoundingClientRect().top - top });
				});
				return;
			}
			requestAnimationFrame(look);
		};
		requestAnimationFrame(look);
	})`)
}

// addProbe installs the probe for the message of sequence seq.
func (b *browser) addProbe(seq int64) error {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: fmt.Sprintf(probe, seq)})
	return err
}
