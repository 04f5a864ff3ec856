package oauth_test

import (
	"strings"
	"testing"
)

// TestRenderConsentTheme: the consent page is dark when the person chose
// dark, light when they chose light (whatever the device prefers), and
// follows the device's dark mode otherwise; a theme that is not one of
// the two is the device's.
func TestRenderConsentTheme(t *testing.T) {
	t.Parallel()
	const darkRule = "body { background: #111317;"
	for _, tc := range []struct {
		theme, colorScheme string
		dark, media        bool // the dark rules, inside the media query
	}{
		{"dark", "dark", true, false},
		{"light", "light", false, false},
		{"", "light dark", true, true},
		{"system", "light dark", true, true},
		{`dark"><script>`, "light dark", true, true},
	} {
		v := consentView()
		v.Theme = tc.theme
		_, body := render(t, v)
		if want := `<meta name="color-scheme" content="` + tc.colorScheme + `">`; !strings.Contains(body, want) {
			t.Errorf("theme %q: the page lacks %s", tc.theme, want)
		}
		if got := strings.Contains(body, darkRule); got != tc.dark {
			t.Errorf("theme %q: the dark rules present = %v, want %v", tc.theme, got, tc.dark)
		}
		if got := strings.Contains(body, "@media (prefers-color-scheme: dark)"); got != tc.media {
			t.Errorf("theme %q: the device's dark mode followed = %v, want %v", tc.theme, got, tc.media)
		}
		if strings.Contains(body, "<script") {
			t.Errorf("theme %q: the page has a script", tc.theme)
		}
	}
}
