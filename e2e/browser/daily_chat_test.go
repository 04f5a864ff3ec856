package browser

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/broker/oauth/oauthtest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
)

// downloaded waits for a file ending in suffix in dir and returns its
// content.
func downloaded(t *testing.T, dir, suffix string) []byte {
	t.Helper()
	var b []byte
	testenv.WaitFor(t, conditionTimeout, func() bool {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), suffix) {
				b, _ = os.ReadFile(filepath.Join(dir, e.Name()))
			}
		}
		return len(b) > 0
	})
	return b
}

// TestBrowserAttachmentLimitAndExport: the page refuses, before uploading
// it, a file over the server's own attachment limit (2 KiB here, not the
// default 10 MiB) and says that limit; an export of a conversation with an
// attachment names it — in Markdown a link to its content, in JSON its
// metadata.
func TestBrowserAttachmentLimitAndExport(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{"USHER_ASSISTANT_ATTACHMENTS_MAX_BYTES": "2048"})
	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	tb.startSession("hello")
	tb.waitBadge("Active")
	runID := tb.runID()

	uploads := tb.sent("POST", attachmentsURL)
	tb.drop("big.txt", "text/plain", []byte(strings.Repeat("a line\n", 500)))
	tb.waitUntil("the refusal", `document.querySelector("#main .composer .attachment-error")?.textContent.includes("big.txt")`)
	if got := tb.text(`#main .composer .attachment-error`); !strings.Contains(got, "files up to 2.0 KB") {
		t.Errorf("the refusal says %q, want the server's limit (2.0 KB)", got)
	}
	if n := tb.sent("POST", attachmentsURL); n != uploads {
		t.Errorf("a file over the server's limit was uploaded: %d uploads, want %d", n, uploads)
	}

	tb.drop("notes [draft].md", "text/markdown", []byte("# Plan\n"))
	tb.trayHolds(1)
	tb.send("Read my notes")
	tb.waitUntil("the chip", userAttachments+` === "file:notes [draft].md"`)
	var att map[string]any
	for _, m := range apiMessages(t, s, userToken(t, s, "alice"), runID) {
		data, _ := m["data"].(map[string]any)
		if list, ok := data["attachments"].([]any); ok && len(list) == 1 {
			att = list[0].(map[string]any)
		}
	}
	if att == nil {
		t.Fatal("the API shows no message with the attachment")
	}

	dir := t.TempDir()
	call(tb, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir, BrowserContextID: tb.browserContext()})
	tb.more(`button.export-md`)
	md := string(downloaded(t, dir, ".md"))
	if want := `- Attachment: [notes \[draft\].md](` + s.url + `/api/assistant/attachments/` + att["id"].(string) + `) (text/markdown`; !strings.Contains(md, want) {
		t.Errorf("the Markdown export lacks %q:\n%s", want, md)
	}
	tb.more(`button.export-json`)
	var export struct {
		Messages []struct {
			Data struct {
				Attachments []map[string]any `json:"attachments"`
			} `json:"data"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(downloaded(t, dir, ".json"), &export); err != nil {
		t.Fatalf("the JSON export: %v", err)
	}
	var got []map[string]any
	for _, m := range export.Messages {
		got = append(got, m.Data.Attachments...)
	}
	if len(got) != 1 || got[0]["id"] != att["id"] || got[0]["name"] != "notes [draft].md" || got[0]["sha256"] != att["sha256"] || got[0]["size"] != att["size"] {
		t.Errorf("the JSON export's attachments = %v, want [%v]", got, att)
	}
	tb.checkClean()
}

// metaOpacity is the opacity of the actions (Edit, Delete, the time) of
// the first user message.
const metaOpacity = `getComputedStyle(document.querySelector("article.msg-user .msg-meta")).opacity`

// mouseDevice is Chromium's command line for a device with a mouse:
// headless, it has none (hover: none, pointer: none), and
// Emulation.setEmulatedMedia does not emulate those two features.
var mouseDevice = chromedp.Flag("blink-settings", "primaryHoverType=2,availableHoverTypes=2,primaryPointerType=4,availablePointerTypes=4")

// TestBrowserMessageActionsOnHover: with a mouse (hover: hover, pointer:
// fine) a message's actions are hidden until the pointer is over it or
// the keyboard's focus is in it; on a touch screen (hover: none, pointer:
// coarse) they are always shown.
func TestBrowserMessageActionsOnHover(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	tb := startBrowser(t, mouseDevice)
	tb.signIn(s.url, "alice")
	tb.waitUntil("a mouse", `matchMedia("(hover: hover) and (pointer: fine)").matches`)
	tb.startSession("hello")
	tb.waitBadge("Active")
	tb.waitUntil("the message's actions", `document.querySelector("article.msg-user .msg-meta .msg-edit")`)
	mouse := func(x, y float64) {
		call(tb, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMouseMoved, X: x, Y: y})
	}
	// Away from the messages (the top left corner), then over the message.
	mouse(5, 5)
	evaluate[bool](tb, `(document.activeElement.blur(), true)`)
	tb.waitUntil("the actions hidden", metaOpacity+` === "0"`)
	box := evaluate[[]float64](tb, `(() => { const r = document.querySelector("article.msg-user .msg-body").getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()`)
	mouse(box[0], box[1])
	tb.waitUntil("the actions shown on hover", metaOpacity+` === "1"`)
	mouse(5, 5)
	tb.waitUntil("the actions hidden again", metaOpacity+` === "0"`)
	// The keyboard's focus on an action shows them.
	evaluate[bool](tb, `(document.querySelector("article.msg-user .msg-edit").focus(), true)`)
	tb.waitUntil("the actions shown on focus", metaOpacity+` === "1"`)
	evaluate[bool](tb, `(document.activeElement.blur(), true)`)
	tb.waitUntil("the actions hidden once the focus left", metaOpacity+` === "0"`)
	// A touch screen has no hover: always shown.
	call(tb, emulation.SetTouchEmulationEnabled, emulation.SetTouchEmulationEnabledParams{Enabled: true, MaxTouchPoints: 1})
	tb.waitUntil("a touch screen", `matchMedia("(hover: none) and (pointer: coarse)").matches`)
	tb.waitUntil("the actions shown on touch", metaOpacity+` === "1"`)
	tb.checkClean()
}

// dropOn drops a file on the element sel.
func (tb *tab) dropOn(sel, name, typ string, data []byte) {
	tb.t.Helper()
	evaluate[bool](tb, `(() => { const dt = `+fileJS(name, typ, data)+`; const f = document.querySelector(`+js(sel)+`);
		f.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
		return f.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true })); })()`)
}

// Selectors of the form that edits a message.
const (
	editForm = `article.msg-user .edit-form`
	editTray = editForm + ` .composer-attachments`
)

// TestBrowserEditAttachments: editing a message keeps its attachments,
// removes one, adds one by drop and one by the form's Attach button; the
// edited message sends what the form held, as the API shows it.
func TestBrowserEditAttachments(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	tb.startSession("hello")
	tb.waitBadge("Active")
	runID := tb.runID()
	alice := userToken(t, s, "alice")

	tb.drop("a.md", "text/markdown", []byte("# A\n"))
	tb.trayHolds(1)
	tb.send("first")
	tb.waitUntil("the chip", userAttachments+` === "file:a.md"`)
	tb.waitBadge("Active")
	tb.waitUntil("the reply to the first", `document.querySelectorAll("article.msg-assistant").length >= 2`)

	sentNames := func() []string {
		msgs := apiMessages(t, s, alice, runID)
		var names []string
		for i := len(msgs) - 1; i >= 0; i-- {
			data, _ := msgs[i]["data"].(map[string]any)
			if msgs[i]["type"] != "message.user" {
				continue
			}
			list, _ := data["attachments"].([]any)
			for _, a := range list {
				names = append(names, a.(map[string]any)["name"].(string))
			}
			break
		}
		return names
	}
	// lastEdit is the Edit button of the last user message.
	lastEdit := func() string {
		seq := evaluate[string](tb, `[...document.querySelectorAll("article.msg-user")].at(-1).dataset.seq`)
		return `article.msg-user[data-seq="` + seq + `"] .msg-edit`
	}
	trayNames := `[...document.querySelectorAll(` + js(editTray+` li[data-attachment] .attachment-name`) + `)].map((e) => e.textContent).join(",")`

	// Edit: a.md kept in the form; removed; b.md dropped on the form.
	tb.click(lastEdit())
	tb.waitUntil("the form holds a.md", trayNames+` === "a.md"`)
	tb.click(editTray + ` button.attachment-remove[aria-label="Remove a.md"]`)
	tb.waitUntil("a.md removed", trayNames+` === ""`)
	tb.dropOn(editForm, "b.md", "text/markdown", []byte("# B\n"))
	tb.waitUntil("b.md in the form", trayNames+` === "b.md"`)
	tb.click(editForm + ` button[type=submit]`)
	tb.waitUntil("the edited message with b.md", `!document.querySelector(`+js(editForm)+`) && [...document.querySelectorAll("article.msg-user")].some((a) => a.querySelector(".msg-body")?.textContent === "first" && a.querySelector(".attachment-name")?.textContent === "b.md")`)
	if got := sentNames(); !slices.Equal(got, []string{"b.md"}) {
		t.Errorf("the edited message sends %v, want [b.md]", got)
	}
	tb.waitBadge("Active")

	// Edit again: b.md kept, c.txt added by the form's Attach button.
	cPath := filepath.Join(t.TempDir(), "c.txt")
	if err := os.WriteFile(cPath, []byte("see"), 0o600); err != nil {
		t.Fatal(err)
	}
	tb.click(lastEdit())
	tb.waitUntil("the form holds b.md", trayNames+` === "b.md"`)
	tb.do(chromedp.SetUploadFiles(chromedp.CSS(editForm+` input[type=file]`), []string{cPath}))
	tb.waitUntil("c.txt in the form", trayNames+` === "b.md,c.txt"`)
	checkAxe(t, tb, "editing a message with attachments")
	tb.click(editForm + ` button[type=submit]`)
	tb.waitUntil("the edited message with both", `!document.querySelector(`+js(editForm)+`)`)
	testenv.WaitFor(t, conditionTimeout, func() bool { return slices.Equal(sentNames(), []string{"b.md", "c.txt"}) })
	tb.checkClean()
}

// startWithApp starts a server with an OAuth client named name registered,
// whose redirect URI is a server of the test's that answers nothing.
func startWithApp(t *testing.T, name string) (*server, *oauthtest.App) {
	t.Helper()
	s := startServer(t, nil)
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(cb.Close)
	return s, oauthtest.Register(t, s.url, name, cb.URL+"/callback")
}

// TestBrowserConsentFollowsSettings: the OAuth consent page shows the
// theme the person chose in their settings — dark, chosen with the
// Sessions UI's theme button, on a light device; light on a dark device —
// and the device's own when they chose the system's.
func TestBrowserConsentFollowsSettings(t *testing.T) {
	t.Parallel()
	s, app := startWithApp(t, "Theme App")
	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	alice := userToken(t, s, "alice")
	savedTheme := func() string {
		_, out := apitest.Call(t, "GET", s.url+"/api/assistant/settings", alice, "")
		theme, _ := out["theme"].(string)
		return theme
	}
	// The theme button: system → light → dark, saved in the settings.
	for _, want := range []string{"light", "dark"} {
		tb.click(`.sidebar .theme-toggle`)
		tb.waitUntil("the theme "+want, `document.documentElement.dataset.theme === `+js(want))
	}
	testenv.WaitFor(t, conditionTimeout, func() bool { return savedTheme() == "dark" })

	consent := func(device string) string {
		t.Helper()
		call(tb, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: device}},
		})
		u, _ := app.AuthorizeURL()
		tb.do(chromedp.Navigate(u))
		tb.waitUntil("the consent page", `document.querySelector("button[value=approve]")`)
		tb.waitUntil("a "+device+" device", `matchMedia("(prefers-color-scheme: `+device+`)").matches`)
		return evaluate[string](tb, `getComputedStyle(document.body).backgroundColor`)
	}
	const dark, light = "rgb(17, 19, 23)", "rgb(245, 245, 244)"
	if got := consent("light"); got != dark {
		t.Errorf("dark chosen, on a light device: the consent page's background is %s, want %s", got, dark)
	}
	checkAxe(t, tb, "the consent page in the dark theme chosen")
	for _, tc := range []struct{ theme, device, want string }{
		{"light", "dark", light},
		{"system", "dark", dark},
		{"system", "light", light},
	} {
		if code, out := apitest.Call(t, "PUT", s.url+"/api/assistant/settings", alice, `{"theme": "`+tc.theme+`"}`, "Content-Type", "application/json"); code != http.StatusOK {
			t.Fatalf("PUT settings: %d %v", code, out)
		}
		if got := consent(tc.device); got != tc.want {
			t.Errorf("%s chosen, on a %s device: the consent page's background is %s, want %s", tc.theme, tc.device, got, tc.want)
		}
	}
	tb.checkClean()
}
