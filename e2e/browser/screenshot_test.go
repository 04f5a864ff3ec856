package browser

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
)

// chartPNG is the README screenshot's attached image: a bar chart of four
// weeks' support tickets, drawn.
func chartPNG(t *testing.T) []byte {
	t.Helper()
	const w, h = 360, 220
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{R: 255, G: 255, B: 255, A: 255})
		}
	}
	axis := color.RGBA{R: 120, G: 120, B: 130, A: 255}
	for x := 30; x < w-10; x++ {
		img.Set(x, h-25, axis)
	}
	for y := 15; y < h-25; y++ {
		img.Set(30, y, axis)
	}
	bar := color.RGBA{R: 37, G: 99, B: 235, A: 255}
	top := color.RGBA{R: 234, G: 88, B: 12, A: 255}
	for i, v := range []int{23, 31, 42, 28} {
		c := bar
		if v == 42 {
			c = top
		}
		x0 := 50 + i*75
		for x := x0; x < x0+50; x++ {
			for y := h - 26 - v*4; y < h-25; y++ {
				img.Set(x, y, c)
			}
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// openWithImage pastes the PNG data, named name, into the new-session box
// and sends question with it; the model answers reply (plain text, or
// Markdown whose first 12 characters are). It returns once the
// conversation shows the reply and the image's thumbnail.
func (tb *tab) openWithImage(ms *modeltest.Server, name string, data []byte, question, reply string) {
	tb.t.Helper()
	tb.paste(name, "image/png", data)
	tb.trayHolds(1)
	ms.Reply(reply)
	tb.send(question)
	tb.waitUntil("the conversation of the new run", `/^\/runs\/[^/]+$/.test(location.pathname)`)
	tb.waitUntil("the reply", `[...document.querySelectorAll("article.msg-assistant .msg-body")].some((e) => e.textContent.includes(`+js(reply[:12])+`))`)
	tb.waitUntil("the thumbnail", userAttachments+` === "img:`+name+`"`)
}

// TestBrowserREADMEScreenshot takes the README's screenshot (written to
// docs/ when USHER_UPDATE_SCREENSHOT=1): at 1280×800, light, the sidebar
// with a pinned conversation first and others, and a conversation whose
// question has an attached chart, the reply, and a note to save waiting
// for approval — its bar pinned above the message box.
func TestBrowserREADMEScreenshot(t *testing.T) {
	t.Parallel()
	ms := modeltest.NewServer(t)
	s := startServer(t, ms.UsherEnv("USHER_MODEL_IMAGES", "true"))
	grace := userToken(t, s, "grace")
	for i, title := range []string{"Draft reply to Acme's security questionnaire", "SQL for monthly active users", "Quarterly roadmap review"} {
		code, out := apitest.Call(t, "POST", s.url+"/api/assistant/runs", grace, `{}`, "Content-Type", "application/json")
		if code != http.StatusCreated {
			t.Fatalf("POST /runs: %d %v", code, out)
		}
		id := out["runId"].(string)
		if code, out := apitest.Call(t, "PATCH", s.url+"/api/assistant/runs/"+id, grace, `{"title": `+js(title)+`}`, "Content-Type", "application/json"); code != http.StatusOK {
			t.Fatalf("rename: %d %v", code, out)
		}
		if i == 2 {
			if code, out := apitest.Call(t, "PUT", s.url+"/api/assistant/runs/"+id+"/pin", grace, ""); code != http.StatusOK {
				t.Fatalf("pin: %d %v", code, out)
			}
		}
	}
	tb := startBrowser(t)
	tb.signIn(s.url, "grace")
	tb.waitUntil("the home screen", `document.querySelector("#home-title")`)
	tb.openWithImage(ms, "tickets-by-week.png", chartPNG(t), "Which week had the most support tickets?",
		"Week 3 had the most support tickets: **42**, almost twice week 1's 23. Weeks 2 and 4 had 31 and 28.")
	tb.waitBadge("Active")
	ms.ReplyToolCalls(model.ToolCall{ID: "call-save", Name: "notes_write",
		Arguments: json.RawMessage(`{"name":"tickets-week-3","body":"Week 3 had the most tickets: 42 (week 1: 23, week 2: 31, week 4: 28)."}`)})
	tb.send("Save that as a note")
	tb.waitBadge("Awaiting approval")
	checkAxeVariants(t, tb, "the README's conversation")
	takeScreenshot(t, tb)
	tb.checkClean()
}
