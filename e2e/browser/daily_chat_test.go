package browser

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

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
	call(tb, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir})
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
