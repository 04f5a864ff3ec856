package browser

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
)

// Selectors of the composer's attachments.
const (
	attachInput    = `#main .composer input[type=file]`
	attachButton   = `#main .composer .attach-button`
	composerTray   = `#main .composer .composer-attachments`
	attachmentsURL = "/api/assistant/attachments"
)

// testPNG is a small PNG of w×h pixels.
func testPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		img.Set(x, x%h, color.RGBA{R: 200, A: 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// fileJS is a JavaScript expression of a DataTransfer holding one File.
func fileJS(name, typ string, data []byte) string {
	return `(() => { const b = Uint8Array.from(atob(` + js(base64.StdEncoding.EncodeToString(data)) + `), (c) => c.charCodeAt(0));
		const dt = new DataTransfer(); dt.items.add(new File([b], ` + js(name) + `, { type: ` + js(typ) + ` })); return dt; })()`
}

// paste pastes a file into the composer's message box, as a browser does
// for an image copied to the clipboard.
func (tb *tab) paste(name, typ string, data []byte) {
	tb.t.Helper()
	evaluate[bool](tb, `document.querySelector(`+js(composerInput)+`).dispatchEvent(new ClipboardEvent("paste", { clipboardData: `+fileJS(name, typ, data)+`, bubbles: true, cancelable: true }))`)
}

// drop drops a file on the composer.
func (tb *tab) drop(name, typ string, data []byte) {
	tb.t.Helper()
	evaluate[bool](tb, `(() => { const dt = `+fileJS(name, typ, data)+`; const f = document.querySelector("#main .composer");
		f.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
		return f.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true })); })()`)
}

// attachByButton picks a file with the composer's Attach button's file
// chooser.
func (tb *tab) attachByButton(path string) {
	tb.t.Helper()
	tb.waitUntil("the Attach button", `document.querySelector(`+js(attachButton)+`)?.textContent.includes("Attach")`)
	tb.do(chromedp.SetUploadFiles(chromedp.CSS(attachInput), []string{path}))
}

// trayHolds waits until the composer's tray shows n uploaded files.
func (tb *tab) trayHolds(n int) {
	tb.t.Helper()
	tb.waitUntil("the tray holds the files", `document.querySelectorAll(`+js(composerTray+` li[data-attachment]`)+`).length === `+strconv.Itoa(n)+
		` && !document.querySelector(`+js(composerTray+` li.uploading`)+`)`)
}

// userAttachments is, for the user message with text, its attachments as
// the page shows them: "img:NAME" for a thumbnail whose image loaded,
// "file:NAME" for a chip.
const userAttachments = `[...document.querySelectorAll("article.msg-user .attachments li")].map((li) => {
	const img = li.querySelector("img");
	return img ? (img.complete && img.naturalWidth > 0 ? "img:" + img.alt : "img-unloaded:" + img.alt) : "file:" + li.querySelector(".attachment-name").textContent;
}).join(",")`

// TestBrowserAttachments drives attachments in Chromium, with a model that
// takes images: a PNG by the Attach button, an image pasted into the
// message box, a Markdown file dropped on the composer, and an executable
// refused before any upload; the message goes with all three, the model
// server receives the images as image_url parts (data URLs) and the text
// file fenced under its name; the conversation shows thumbnails and a
// chip, again after a reload; another user gets 404 for the attachment's
// URL.
func TestBrowserAttachments(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv("USHER_MODEL_IMAGES", "true"))
	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	tb.startSession("hello")
	tb.waitBadge("Active")
	runID := tb.runID()

	photo, pasted := testPNG(t, 40, 30), testPNG(t, 8, 8)
	photoPath := filepath.Join(t.TempDir(), "photo.png")
	if err := os.WriteFile(photoPath, photo, 0o600); err != nil {
		t.Fatal(err)
	}
	tb.attachByButton(photoPath)
	tb.trayHolds(1)
	tb.paste("image.png", "image/png", pasted)
	tb.trayHolds(2)
	tb.drop("notes.md", "text/markdown", []byte("# Plan\n\n- ship attachments\n"))
	tb.trayHolds(3)

	// Refused before it is uploaded, with a message that says why.
	uploads := tb.sent("POST", attachmentsURL)
	tb.drop("setup.exe", "application/octet-stream", []byte("MZ"))
	tb.waitUntil("the refusal", `document.querySelector("#main .composer .attachment-error")?.textContent.includes("setup.exe")`)
	if n := tb.sent("POST", attachmentsURL); n != uploads {
		t.Errorf("a refused file was uploaded: %d uploads, want %d", n, uploads)
	}
	if uploads != 3 {
		t.Errorf("%d uploads for three files", uploads)
	}
	checkAxe(t, tb, "the composer with attachments")

	ms.Reply("I see a photo, a pasted image and your plan.")
	tb.send("What are these?")
	tb.waitUntil("the reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes("your plan"))`)
	tb.waitUntil("the thumbnails and the chip", userAttachments+` === "img:photo.png,img:image.png,file:notes.md"`)
	// A message without attachments shows none, and nothing in their
	// place.
	if got := evaluate[string](tb, `[...document.querySelectorAll("article.msg-user")].map((a) => [...a.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join("")).join("|")`); got != "|" {
		t.Errorf("the user messages hold loose text %q", got)
	}
	if evaluate[bool](tb, `!!document.querySelector(`+js(composerTray+` li`)+`)`) {
		t.Error("the tray still holds files after the message went")
	}

	reqs := ms.Requests()
	body := string(reqs[len(reqs)-1].Body)
	for _, img := range [][]byte{photo, pasted} {
		if !strings.Contains(body, `"image_url":{"url":"data:image/png;base64,`+base64.StdEncoding.EncodeToString(img)+`"}`) {
			t.Errorf("the model request lacks an image part: %.600s", body)
		}
	}
	msgs := reqs[len(reqs)-1].Messages
	if last := msgs[len(msgs)-1]; !strings.Contains(last.Content, "What are these?") || !strings.Contains(last.Content, "File \"notes.md\":\n```\n# Plan") {
		t.Errorf("the model's user message = %q", last.Content)
	}

	// After a reload, the same.
	tb.do(chromedp.Reload())
	tb.waitUntil("the attachments after a reload", userAttachments+` === "img:photo.png,img:image.png,file:notes.md"`)
	checkAxe(t, tb, "a conversation with attachments")

	// The attachment's URL: its owner reads it, another user gets 404.
	alice, bob := userToken(t, s, "alice"), userToken(t, s, "bob")
	var photoID string
	for _, m := range apiMessages(t, s, alice, runID) {
		data, _ := m["data"].(map[string]any)
		if list, ok := data["attachments"].([]any); ok && len(list) == 3 {
			photoID = list[0].(map[string]any)["id"].(string)
		}
	}
	if photoID == "" {
		t.Fatal("the API shows no message with three attachments")
	}
	get := func(token string) (int, []byte) {
		req, _ := http.NewRequest("GET", s.url+attachmentsURL+"/"+photoID, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	if code, b := get(alice); code != http.StatusOK || !bytes.Equal(b, photo) {
		t.Errorf("alice's download: %d, %d bytes", code, len(b))
	}
	if code, b := get(bob); code != http.StatusNotFound || bytes.Contains(b, photo[:16]) {
		t.Errorf("bob's download: %d %q, want 404", code, b)
	}
	if code, out := apitest.Call(t, "GET", s.url+attachmentsURL+"/"+photoID, bob, ""); code != http.StatusNotFound {
		t.Errorf("bob's download: %d %v", code, out)
	}

	// The server's limit on other bodies (server.max_body_bytes, 1 MiB)
	// is not an attachment's: 3 MiB is taken, 11 MiB is refused as over
	// assistant.attachments_max_bytes.
	big := strings.Repeat("a line of a long log\n", 3<<20/21)
	if code, out := apitest.Call(t, "POST", s.url+attachmentsURL+"?name=big.log", alice, big, "Content-Type", "text/plain"); code != http.StatusCreated {
		t.Errorf("a 3 MiB upload: %d %v", code, out)
	}
	code, out := apitest.Call(t, "POST", s.url+attachmentsURL+"?name=huge.log", alice, strings.Repeat(big, 4), "Content-Type", "text/plain")
	if e, _ := out["error"].(map[string]any); code != http.StatusRequestEntityTooLarge || e["code"] != "attachment_too_large" {
		t.Errorf("an 11 MiB upload: %d %v", code, out)
	}
	tb.checkClean()
}

// TestBrowserAttachmentsTextOnly: with a text-only model (the default),
// an image pasted into the new-session box opens the session with it, and
// reaches the model as a placeholder naming it, and no image part.
func TestBrowserAttachmentsTextOnly(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv())
	tb := startBrowser(t)
	tb.signIn(s.url, "alice")
	tb.waitUntil("the new-session view", `document.querySelector("#home-title")`)

	tb.openWithImage(ms, "diagram.png", testPNG(t, 12, 10), "Describe it.", "A diagram, I am told.")

	reqs := ms.Requests()
	last := reqs[len(reqs)-1]
	if strings.Contains(string(last.Body), "image_url") {
		t.Errorf("the text-only model got an image part: %.400s", last.Body)
	}
	if m := last.Messages[len(last.Messages)-1]; !strings.Contains(m.Content, `[image: "diagram.png", image/png, `) {
		t.Errorf("the text-only model's message = %q, want a placeholder for the image", m.Content)
	}
	tb.checkClean()
}
