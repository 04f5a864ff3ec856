package testenv

import (
	"net/url"
	"os"
	"testing"
)

// UnderCI reports whether the tests run under CI, where nothing they need
// may be missing.
func UnderCI() bool { return os.Getenv("CI") != "" }

// Missing stops a test that cannot run here: it is skipped with reason —
// which should say what is missing and how to provide it — or, under CI,
// fails with it.
func Missing(t testing.TB, reason string) {
	t.Helper()
	if UnderCI() {
		t.Fatalf("CI is set, and a test needs what is missing: %s", reason)
	}
	t.Skip(reason)
}

// DatabaseURLEnv names the environment variable holding the URL of the
// PostgreSQL server the tests run against, such as
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
const DatabaseURLEnv = "TEST_DATABASE_URL"

// NoDatabase is the reason a PostgreSQL test is skipped.
const NoDatabase = "PostgreSQL: " + DatabaseURLEnv + " is not set; run with " + DatabaseURLEnv +
	"='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' (or .ci/run, which starts PostgreSQL)"

// DatabaseURL returns TEST_DATABASE_URL, checked to be a postgres:// URL.
// Without it the test is Missing PostgreSQL. A test that uses the server
// makes a schema or database of its own there (store/storetest).
func DatabaseURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(DatabaseURLEnv)
	if base == "" {
		Missing(t, NoDatabase)
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL", DatabaseURLEnv)
	}
	return base
}

// ChromiumPath is Debian's Chromium, which the browser tests drive and
// .ci/run installs.
const ChromiumPath = "/usr/bin/chromium"

// NoChromium is the reason a browser test is skipped.
const NoChromium = "Chromium: " + ChromiumPath + " is missing; install it (apt-get install chromium, as .ci/run does) to run the browser tests"

// Chromium returns ChromiumPath; without it the test is Missing Chromium.
func Chromium(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		Missing(t, NoChromium)
	}
	return ChromiumPath
}
