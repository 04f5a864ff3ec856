// Package browser owns the browser tests of the Sessions UI: each drives
// the UI in a real headless Chromium (Debian's, which .ci/run installs) the
// way a person would — the development provider's sign-in form, the
// composer, the Approve button, a reload, Sign out — against `usher serve`
// run as its own process (the binary internal/testenv provides), with a
// fresh data directory, the embedded default or PostgreSQL, and the demo
// or a scripted model. It watches the page for what must never happen (an
// uncaught exception, a console error, a Content-Security-Policy
// violation, a JavaScript dialog) and runs axe-core on the pages people
// use. The tests share one Chromium, each in a browser context of its own
// (its own cookies, storage and permissions, as a fresh profile); a test
// that needs Chromium started with other flags starts its own. Without
// Chromium the tests skip, except under CI, where they fail.
package browser
