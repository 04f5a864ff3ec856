package oauth

import (
	"bytes"
	_ "embed"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/usherhq/usher/broker"
)

// The consent form's fields, as the consent page posts them back.
const (
	FormCSRFToken = "csrf_token" // the CSRF token of ConsentView.CSRFToken
	FormRequest   = "request"    // ConsentView.RequestID, naming the pending authorization request
	FormDecision  = "decision"   // DecisionApprove or DecisionDeny, the button pressed

	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// The kinds of client, as the store names them; the consent page says where
// the client came from by its kind.
const (
	ClientKindRegistered       = "registered"        // Dynamic Client Registration
	ClientKindMetadataDocument = "metadata_document" // the client id is the URL of its metadata document
	ClientKindConfigured       = "configured"        // pre-registered in Usher's configuration
)

// Display limits of the consent page: a client chooses its name and URLs,
// and must not crowd out the rest of the page.
const (
	maxDisplayName = 60
	maxDisplayURL  = 120
)

// ConsentView is what the consent page shows: who asks (the client, and
// where it came from), for what (scopes, resource), and where the browser
// will go (the redirect URI's host).
type ConsentView struct {
	ClientName     string    // as the client gave it; may be empty
	ClientID       string    // shown for a metadata document client (its URL) and when there is no name
	ClientKind     string    // a ClientKind constant
	RegisteredAt   time.Time // for a registered client: when
	RegisteredFrom string    // for a registered client: from which address
	RedirectURI    string    // the requested redirect URI; its host is shown
	Scopes         []string
	Resource       string // the MCP resource the tokens will be for
	User           string // who is signed in, as the page greets them; may be empty
	// Theme is the colour theme the person chose in their settings:
	// "light" or "dark"; anything else (the default, "system") follows
	// the device's.
	Theme string

	Action    string // where the form posts: a path on Usher's own origin, such as /oauth/authorize
	CSRFToken string // posted as FormCSRFToken
	RequestID string // posted as FormRequest; may be empty
}

// scopeDescriptions say in words what a scope lets a client do.
var scopeDescriptions = map[string]string{
	broker.ScopeInvoke: "Use Usher's MCP tools as you, under the same policy and approvals as in Usher itself.",
}

//go:embed consent.html
var consentHTML string

var consentTemplate = template.Must(template.New("consent").Parse(consentHTML))

// consentData is the template's data: every string already made safe to
// show (truncated, without control or formatting characters); html/template
// escapes them.
type consentData struct {
	Name, Origin, ClientURL, RedirectHost, RedirectNote, Resource, User string
	Scopes                                                              []scopeLine
	Action, CSRFToken, RequestID                                        string
	FieldCSRF, FieldRequest, FieldDecision                              string
	Approve, Deny                                                       string
	// Theme is "light", "dark" or "" (the device's).
	Theme string
}

type scopeLine struct{ Name, Description string }

// RenderConsent writes the consent page for v with 200, and the headers that
// keep it from being framed, cached, leaking its URL to other sites or
// running anything: Content-Security-Policy (default-src 'none'; style-src
// 'self' 'unsafe-inline'; form-action 'self' and the redirect URI's origin;
// frame-ancestors 'none'), X-Frame-Options: DENY, Cache-Control: no-store,
// Referrer-Policy: same-origin. The form's post must carry its Origin,
// which a browser sends as "null" under no-referrer, and its answer
// redirects to the client, which form-action must allow: browsers apply
// it to the redirects of a form's submission. Text from the client is escaped by html/template, stripped
// of control and bidirectional-formatting characters and truncated, so a
// hostile name cannot inject markup or reorder the page's words. v.Action
// must be a path on Usher's own origin, v.CSRFToken non-empty; otherwise
// RenderConsent writes nothing and returns an error.
func RenderConsent(w http.ResponseWriter, v ConsentView) error {
	if !strings.HasPrefix(v.Action, "/") || strings.HasPrefix(v.Action, "//") || strings.Contains(v.Action, "\\") {
		return errors.New("oauth: consent form action must be a path on this origin")
	}
	if v.CSRFToken == "" {
		return errors.New("oauth: consent form without a CSRF token")
	}
	var buf bytes.Buffer
	if err := consentTemplate.Execute(&buf, consentDataOf(v)); err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	formAction := "'self'"
	if src := redirectSource(v.RedirectURI); src != "" {
		formAction += " " + src
	}
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self' 'unsafe-inline'; form-action "+formAction+"; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(buf.Bytes())
	return err
}

// redirectSource is the CSP source expression of the redirect URI u: its
// origin for http and https, its scheme for a private-use one (RFC 8252
// §7.1); empty for anything it cannot write safely into the policy.
func redirectSource(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		return ""
	}
	var src string
	switch p.Scheme {
	case "http", "https":
		if p.Host == "" {
			return ""
		}
		src = p.Scheme + "://" + p.Host
	default:
		src = p.Scheme + ":"
	}
	// Only the characters of a scheme, a host and a port: nothing that
	// ends a directive (";", ",") or adds a source (" ").
	if strings.ContainsFunc(src, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".+-:/[]", c))
	}) {
		return ""
	}
	return src
}

// consentDataOf makes v's strings safe to show.
func consentDataOf(v ConsentView) consentData {
	d := consentData{
		Name:          truncate(displayText(v.ClientName), maxDisplayName),
		Resource:      truncate(displayText(v.Resource), maxDisplayURL),
		User:          truncate(displayText(v.User), maxDisplayName),
		Action:        v.Action,
		CSRFToken:     v.CSRFToken,
		RequestID:     v.RequestID,
		FieldCSRF:     FormCSRFToken,
		FieldRequest:  FormRequest,
		FieldDecision: FormDecision,
		Approve:       DecisionApprove,
		Deny:          DecisionDeny,
	}
	if v.Theme == "light" || v.Theme == "dark" {
		d.Theme = v.Theme
	}
	d.RedirectHost, d.RedirectNote = redirectHost(v.RedirectURI)
	id := truncate(displayText(v.ClientID), maxDisplayURL)
	if d.Name == "" {
		d.Name = "An unnamed application"
		if id != "" {
			d.Name = "An unnamed application (" + truncate(id, maxDisplayName) + ")"
		}
	}
	switch v.ClientKind {
	case ClientKindMetadataDocument:
		d.Origin = "Described by its metadata document at"
		d.ClientURL = id
	case ClientKindConfigured:
		d.Origin = "Configured by Usher's operators."
	default:
		d.Origin = "Registered itself"
		if !v.RegisteredAt.IsZero() {
			d.Origin += " on " + v.RegisteredAt.UTC().Format("2 January 2006 at 15:04 UTC")
		}
		if from := truncate(displayText(v.RegisteredFrom), maxDisplayName); from != "" {
			d.Origin += " from " + from
		}
		d.Origin += "; Usher has not verified who made it."
	}
	for _, s := range v.Scopes {
		d.Scopes = append(d.Scopes, scopeLine{Name: truncate(displayText(s), maxDisplayName), Description: scopeDescriptions[s]})
	}
	return d
}

// redirectHost names where the browser goes after consent: the redirect
// URI's host (and port), with the note that a loopback one is an
// application on this computer, or the scheme of a private-use one (an app
// on this device).
func redirectHost(uri string) (host, note string) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" {
		return "an invalid address", ""
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return truncate(displayText(u.Host), maxDisplayURL), ""
	case "http":
		if isLoopbackName(u.Hostname()) {
			return truncate(displayText(u.Host), maxDisplayURL), "an application on this computer"
		}
		return truncate(displayText(u.Host), maxDisplayURL), ""
	default:
		return truncate(displayText(u.Scheme), maxDisplayURL) + ":", "an application on this device"
	}
}

// displayText drops from s what must not reach a page as text: invalid
// UTF-8, controls and formatting characters (bidirectional overrides, which
// could make a name read backwards, zero-width characters).
func displayText(s string) string {
	s = strings.ToValidUTF8(s, "")
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if unsafeRune(r) {
			return -1
		}
		return r
	}, s))
}

// truncate shortens s to at most n characters, ending in "…" when it cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-1]) + "…"
}
