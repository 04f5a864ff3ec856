package assistant

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// testImage encodes a small image in format (png, jpeg or gif).
func testImage(t testing.TB, format string) []byte {
	t.Helper()
	img := image.NewPaletted(image.Rect(0, 0, 4, 3), color.Palette{color.White, color.Black})
	var b bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&b, img)
	case "jpeg":
		err = jpeg.Encode(&b, img, nil)
	case "gif":
		err = gif.Encode(&b, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngBomb is a valid PNG header declaring a w×h image: a few bytes that
// whoever decodes them would have to hold w×h pixels for.
func pngBomb(t testing.TB, w, h uint32) []byte {
	t.Helper()
	b := testImage(t, "png")
	// The IHDR chunk: length (4), "IHDR", width, height, ..., CRC.
	ihdr := b[8:]
	binary.BigEndian.PutUint32(ihdr[8:12], w)
	binary.BigEndian.PutUint32(ihdr[12:16], h)
	binary.BigEndian.PutUint32(ihdr[21:25], crc32.ChecksumIEEE(ihdr[4:21]))
	return b
}

// webpBomb is a WebP (VP8X) header declaring a w×h canvas.
func webpBomb(w, h int) []byte {
	b := make([]byte, 30)
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:8], 22)
	copy(b[8:], "WEBPVP8X")
	binary.LittleEndian.PutUint32(b[16:20], 10)
	w, h = w-1, h-1
	b[24], b[25], b[26] = byte(w), byte(w>>8), byte(w>>16)
	b[27], b[28], b[29] = byte(h), byte(h>>8), byte(h>>16)
	return b
}

// upload sends data as the raw body of an upload named name, of type
// typ ("": none), through api signed in as whoever api's server says.
func upload(t *testing.T, api, name, typ string, data []byte) (int, map[string]any) {
	t.Helper()
	return apitest.Call(t, "POST", api+"/attachments?name="+urlQuery(name), "", string(data), "Content-Type", typ)
}

func urlQuery(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", "#", "%23", "\n", "%0A", "\x07", "%07", "\\", "%5C", "/", "%2F").Replace(s)
}

// uploadForm sends data as a multipart form's part "file".
func uploadForm(t *testing.T, api, filename, typ string, data []byte) (int, map[string]any) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	hdr := make(map[string][]string)
	hdr["Content-Disposition"] = []string{`form-data; name="file"; filename="` + filename + `"`}
	if typ != "" {
		hdr["Content-Type"] = []string{typ}
	}
	part, err := mw.CreatePart(hdr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = part.Write(data)
	_ = mw.Close()
	return apitest.Call(t, "POST", api+"/attachments", "", body.String(), "Content-Type", mw.FormDataContentType())
}

// asUser serves h's API as p.
func asUser(t *testing.T, h *harness, p identity.Principal) string {
	t.Helper()
	handler := h.rt.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), p)))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/api/assistant"
}

// TestAttachmentRefusals: every bad upload gets a clear 4xx and stores
// nothing — a forged type, a polyglot, an image bomb, an empty or
// oversized file, a name with a path or control characters, a type that
// is not taken — while good ones of each kind are stored with their hash.
func TestAttachmentRefusals(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h := newHarness(t, st, model.NewDemo(), &Options{AttachmentMaxBytes: 4096})
		pngData := testImage(t, "png")
		for _, tc := range []struct {
			name, file, typ string
			data            []byte
			code            int
			err             string
		}{
			{"text named .png", "cat.png", "image/png", []byte("hello, I am text"), 415, "attachment_type_mismatch"},
			{"PNG named .txt", "notes.txt", "text/plain", pngData, 415, "attachment_type_mismatch"},
			{"PNG declared GIF", "cat.png", "image/gif", pngData, 415, "attachment_type_mismatch"},
			{"PNG named .gif", "cat.gif", "", pngData, 415, "attachment_type_mismatch"},
			{"JPEG named .png", "cat.png", "", testImage(t, "jpeg"), 415, "attachment_type_mismatch"},
			{"text declared an image", "notes.md", "image/png", []byte("# notes"), 415, "attachment_type_mismatch"},
			{"text that sniffs as GIF", "notes.txt", "", []byte("GIF89a is how this text starts"), 415, "attachment_type_mismatch"},
			{"text with NUL", "notes.txt", "", []byte("a\x00b"), 415, "attachment_type_mismatch"},
			{"text not UTF-8", "notes.txt", "", []byte{0xff, 0xfe, 'a'}, 415, "attachment_type_mismatch"},
			{"PNG and ZIP polyglot", "cat.png", "image/png", append(bytes.Clone(pngData), "PK\x03\x04zipped payload"...), 415, "attachment_type_mismatch"},
			{"JPEG and HTML polyglot", "cat.jpg", "image/jpeg", append(testImage(t, "jpeg"), "<script>alert(1)</script>"...), 415, "attachment_type_mismatch"},
			{"PNG bomb", "bomb.png", "image/png", pngBomb(t, 100_000, 100_000), 400, "image_too_large"},
			{"WebP bomb", "bomb.webp", "image/webp", webpBomb(10_000, 10_000), 400, "image_too_large"},
			{"empty", "empty.txt", "text/plain", nil, 400, "empty_attachment"},
			{"oversized", "big.txt", "text/plain", bytes.Repeat([]byte("a"), 4097), 413, "attachment_too_large"},
			{"a path", "../etc/passwd.txt", "text/plain", []byte("x"), 400, "invalid_attachment_name"},
			{"a directory", "notes/today.txt", "text/plain", []byte("x"), 400, "invalid_attachment_name"},
			{"a Windows path", `C:\notes.txt`, "text/plain", []byte("x"), 400, "invalid_attachment_name"},
			{"a bell", "ding\x07.txt", "text/plain", []byte("x"), 400, "invalid_attachment_name"},
			{"a line break", "two\nlines.txt", "text/plain", []byte("x"), 400, "invalid_attachment_name"},
			{"no name", "", "text/plain", []byte("x"), 400, "invalid_attachment_name"},
			{"an executable", "run.exe", "application/octet-stream", []byte("MZ"), 415, "unsupported_attachment"},
			{"a PDF", "doc.pdf", "application/pdf", []byte("%PDF-1.7"), 415, "unsupported_attachment"},
			{"an SVG", "logo.svg", "image/svg+xml", []byte("<svg/>"), 415, "unsupported_attachment"},
		} {
			code, out := upload(t, h.api, tc.file, tc.typ, tc.data)
			if e, _ := out["error"].(map[string]any); code != tc.code || e["code"] != tc.err || e["message"] == "" {
				t.Errorf("%s: %d %v, want %d %s", tc.name, code, out, tc.code, tc.err)
			}
		}
		// A path in a multipart file name is refused, not cut to its last
		// element.
		if code, out := uploadForm(t, h.api, "../../notes.txt", "text/plain", []byte("x")); code != 400 {
			t.Errorf("multipart with a path: %d %v, want 400", code, out)
		}
		if n, err := st.AttachmentBytes(t.Context(), testOwner.ID()); err != nil || n != 0 {
			t.Fatalf("after the refusals the owner holds %d bytes (%v), want none", n, err)
		}

		for _, tc := range []struct {
			name, file, typ, want string
			data                  []byte
		}{
			{"PNG", "cat.png", "image/png", "image/png", pngData},
			{"JPEG", "photo.JPG", "image/jpeg", "image/jpeg", testImage(t, "jpeg")},
			{"GIF", "anim.gif", "", "image/gif", testImage(t, "gif")},
			{"Markdown", "notes.md", "text/markdown", "text/markdown", []byte("# Notes\n\n- one\n")},
			{"CSV", "data.csv", "text/csv", "text/csv", []byte("a,b\n1,2\n")},
			{"JSON", "data.json", "application/json", "application/json", []byte(`{"a": 1}`)},
			{"Go", "main.go", "", "text/plain", []byte("package main\n\nfunc main() {}\n")},
		} {
			code, out := upload(t, h.api, tc.file, tc.typ, tc.data)
			if code != http.StatusCreated || out["type"] != tc.want || out["name"] != tc.file || out["size"] != float64(len(tc.data)) ||
				len(out["sha256"].(string)) != 64 || !strings.HasPrefix(out["id"].(string), "att_") {
				t.Errorf("%s: %d %v", tc.name, code, out)
			}
		}
		if code, out := uploadForm(t, h.api, "form.txt", "text/plain", []byte("from a form")); code != http.StatusCreated || out["name"] != "form.txt" {
			t.Errorf("multipart upload: %d %v", code, out)
		}
	})
}

// TestAttachmentLimitListed: the runs list tells the page the largest file
// it may attach, the server's own.
func TestAttachmentLimitListed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, storetest.NewSQLite(t), model.NewDemo(), &Options{AttachmentMaxBytes: 4096})
	code, out := h.call(t, "GET", "/runs", "")
	limits, _ := out["limits"].(map[string]any)
	if code != http.StatusOK || limits["maxAttachmentBytes"] != float64(4096) {
		t.Errorf("GET /runs: %d, limits %v; want maxAttachmentBytes 4096", code, limits)
	}
}

// TestAttachmentQuota: an upload beyond the owner's quota is refused
// (409) and stores nothing; the same file uploaded again counts once.
func TestAttachmentQuota(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h := newHarness(t, st, model.NewDemo(), &Options{AttachmentMaxBytes: 100, AttachmentQuotaBytes: 150})
		if code, out := upload(t, h.api, "a.txt", "text/plain", bytes.Repeat([]byte("a"), 100)); code != http.StatusCreated {
			t.Fatalf("first upload: %d %v", code, out)
		}
		if code, out := upload(t, h.api, "again.txt", "text/plain", bytes.Repeat([]byte("a"), 100)); code != http.StatusCreated {
			t.Errorf("the same file again (counted once): %d %v", code, out)
		}
		code, out := upload(t, h.api, "b.txt", "text/plain", bytes.Repeat([]byte("b"), 60))
		if e, _ := out["error"].(map[string]any); code != http.StatusConflict || e["code"] != "attachment_quota_exceeded" {
			t.Errorf("over the quota: %d %v", code, out)
		}
		if n, _ := st.AttachmentBytes(t.Context(), testOwner.ID()); n != 100 {
			t.Errorf("the owner holds %d bytes, want 100", n)
		}
	})
}

// TestAttachmentsSent: a message sends attachments by id; the model gets
// the image as an image_url data URL and the text file in a fenced block
// (a provider that takes images), or a placeholder for the image (a
// text-only one); the log holds references only; the download is the
// owner's, another user and a deleted run get 404; a message cannot send
// another person's attachment, nor one sent in another run.
func TestAttachmentsSent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		profile payload.Profile
	}{{"images", payload.OpenAICompatible | payload.Images}, {"text only", payload.OpenAICompatible}} {
		t.Run(tc.name, func(t *testing.T) {
			forEachEngine(t, func(t *testing.T, st store.Store) {
				testAttachmentsSent(t, st, tc.profile)
			})
		})
	}
}

func testAttachmentsSent(t *testing.T, st store.Store, profile payload.Profile) {
	ms, provider := scriptedModel(t)
	h := newHarness(t, st, payload.NewProvider(provider, profile), nil)
	pngData := testImage(t, "png")
	_, img := upload(t, h.api, "cat.png", "image/png", pngData)
	_, txt := upload(t, h.api, "notes.md", "text/markdown", []byte("# Plan\n```go\nx := 1\n```\n"))
	imgID, txtID := img["id"].(string), txt["id"].(string)

	_, run := h.call(t, "POST", "/runs", `{}`)
	runID := run["runId"].(string)
	mallory := asUser(t, h, identity.Principal{Issuer: "https://issuer.test", Tenant: "t", ObjectID: "mallory"})
	_, other := upload(t, mallory, "theirs.txt", "text/plain", []byte("mallory's"))

	// Another person's attachment, or a missing one: refused, nothing
	// stored, nothing bound.
	for _, ids := range []string{`["` + other["id"].(string) + `"]`, `["att_missing"]`, `["` + imgID + `", "` + imgID + `"]`} {
		code, out := h.call(t, "POST", "/runs/"+runID+"/messages", `{"content": "look", "attachments": `+ids+`}`)
		if e, _ := out["error"].(map[string]any); code != http.StatusBadRequest || e["code"] != "invalid_attachments" {
			t.Errorf("attachments %s: %d %v", ids, code, out)
		}
	}
	if r, _ := st.GetRun(t.Context(), runID); r.LastSeq != 0 {
		t.Fatalf("the refused messages stored events: last seq %d", r.LastSeq)
	}
	if a, _ := st.GetAttachment(t.Context(), imgID); a.RunID != "" {
		t.Fatalf("a refused message bound the image to %q", a.RunID)
	}

	code, out := h.call(t, "POST", "/runs/"+runID+"/messages?wait=30s", `{"content": "What is this?", "attachments": ["`+imgID+`", "`+txtID+`"]}`)
	if code != http.StatusOK {
		t.Fatalf("post: %d %v", code, out)
	}
	reqs := ms.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model got no request")
	}
	body := string(reqs[len(reqs)-1].Body)
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngData)
	last := reqs[len(reqs)-1].Messages
	user := last[len(last)-1]
	if !strings.Contains(user.Content, "File \"notes.md\":\n````\n# Plan\n```go") {
		t.Errorf("the model's user message lacks the fenced text file: %q", user.Content)
	}
	if profile&payload.Images != 0 {
		if !strings.Contains(body, `"image_url"`) || !strings.Contains(body, dataURL) {
			t.Errorf("the model request lacks the image part: %.400s", body)
		}
	} else {
		if strings.Contains(body, "image_url") || !strings.Contains(user.Content, `[image: "cat.png", image/png, `) {
			t.Errorf("the text-only model got %q, want a placeholder for the image (body %.300s)", user.Content, body)
		}
	}

	// The log holds references, not content.
	events, _ := st.ListEvents(t.Context(), runID, 0, 100)
	for _, e := range events {
		if bytes.Contains(e.Payload, []byte(base64.StdEncoding.EncodeToString(pngData)[:40])) || bytes.Contains(e.Payload, []byte("x := 1")) {
			t.Errorf("event %d (%s) holds attachment content: %s", e.Seq, e.Type, e.Payload)
		}
	}
	_, msgs := h.call(t, "GET", "/runs/"+runID+"/messages", "")
	first := msgs["messages"].([]any)[0].(map[string]any)["data"].(map[string]any)
	refs, _ := first["attachments"].([]any)
	if len(refs) != 2 || refs[0].(map[string]any)["id"] != imgID || refs[0].(map[string]any)["sha256"] != img["sha256"] {
		t.Errorf("the message's attachments = %v", first["attachments"])
	}

	// A second run cannot send the image again.
	_, run2 := h.call(t, "POST", "/runs", `{}`)
	if code, out := h.call(t, "POST", "/runs/"+run2["runId"].(string)+"/messages", `{"content": "again", "attachments": ["`+imgID+`"]}`); code != http.StatusBadRequest {
		t.Errorf("the image sent in another run: %d %v", code, out)
	}

	download := func(api, id string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Get(api + "/attachments/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, b := download(h.api, imgID)
	if resp.StatusCode != 200 || !bytes.Equal(b, pngData) || resp.Header.Get("Content-Type") != "image/png" ||
		resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("the owner's download: %d %v (%d bytes)", resp.StatusCode, resp.Header, len(b))
	}
	if resp, _ := download(h.api, txtID); resp.Header.Get("Content-Type") != "text/markdown; charset=utf-8" || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment;") {
		t.Errorf("the text file's download: %v", resp.Header)
	}
	if resp, b := download(mallory, imgID); resp.StatusCode != http.StatusNotFound || bytes.Contains(b, pngData[:8]) {
		t.Errorf("another user's download: %d %q", resp.StatusCode, b)
	}
	if resp, _ := download(h.api, other["id"].(string)); resp.StatusCode != http.StatusNotFound {
		t.Errorf("mallory's unsent attachment, downloaded by alice: %d", resp.StatusCode)
	}

	// Deleting the run deletes its attachments.
	if code, out := h.call(t, "DELETE", "/runs/"+runID, ""); code != http.StatusNoContent && code != http.StatusOK {
		t.Fatalf("delete: %d %v", code, out)
	}
	if resp, _ := download(h.api, imgID); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the download after the run was deleted: %d", resp.StatusCode)
	}
	if _, _, err := st.AttachmentData(t.Context(), txtID); err == nil {
		t.Error("the text file outlived its run")
	}
}

// TestUnsentAttachmentsSwept: the sweep deletes the attachments no message
// sent within a day.
func TestUnsentAttachmentsSwept(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		var later atomic.Bool
		h := newHarness(t, st, model.NewDemo(), &Options{Now: func() time.Time {
			if later.Load() {
				return time.Now().Add(unsentAttachmentTTL + time.Minute)
			}
			return time.Now()
		}})
		_, a := upload(t, h.api, "a.txt", "text/plain", []byte("unsent"))
		h.rt.sweepAttachments(t.Context())
		if _, err := st.GetAttachment(t.Context(), a["id"].(string)); err != nil {
			t.Fatalf("a fresh attachment was swept: %v", err)
		}
		later.Store(true)
		h.rt.sweepAttachments(t.Context())
		if _, err := st.GetAttachment(t.Context(), a["id"].(string)); err == nil {
			t.Error("an attachment unsent for a day outlived the sweep")
		}
	})
}

// TestAttachmentsKeptByEdits: an edited message, and a regenerated one,
// send the attachments of the message they replace or repeat; an edit
// that names attachments sends those instead — kept, added or removed —
// and one naming another person's attachment, or empty with none, is
// refused and stores nothing.
func TestAttachmentsKeptByEdits(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h := newHarness(t, st, model.NewDemo(), nil)
		_, a := upload(t, h.api, "cat.png", "image/png", testImage(t, "png"))
		_, more := upload(t, h.api, "notes.md", "text/markdown", []byte("# Plan\n"))
		catID, notesID := a["id"].(string), more["id"].(string)
		_, run := h.call(t, "POST", "/runs", `{}`)
		runID := run["runId"].(string)
		code, out := h.call(t, "POST", "/runs/"+runID+"/messages?wait=30s", `{"content": "look", "attachments": ["`+catID+`"]}`)
		if code != http.StatusOK {
			t.Fatalf("post: %d %v", code, out)
		}
		seq := int64(out["seq"].(float64))
		attachmentsOf := func(what string, want ...string) {
			t.Helper()
			_, msgs := h.call(t, "GET", "/runs/"+runID+"/messages", "")
			list := msgs["messages"].([]any)
			var last map[string]any
			for _, m := range list {
				if m.(map[string]any)["type"] == EventUserMessage {
					last = m.(map[string]any)["data"].(map[string]any)
				}
			}
			refs, _ := last["attachments"].([]any)
			var got []string
			for _, r := range refs {
				got = append(got, r.(map[string]any)["id"].(string))
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: the message's attachments = %v, want %v", what, got, want)
			}
		}
		edit := func(what, body string, want ...string) {
			t.Helper()
			code, out := h.call(t, "POST", "/runs/"+runID+"/messages/"+strconv.FormatInt(seq, 10)+"/edit?wait=30s", body)
			if code != http.StatusOK && code != http.StatusCreated && code != http.StatusAccepted {
				t.Fatalf("%s: %d %v", what, code, out)
			}
			seq = int64(out["seq"].(float64))
			waitHandled(t, st, runID, seq, 30*time.Second)
			attachmentsOf(what, want...)
		}
		edit("edited", `{"content": "look again"}`, catID)
		code, out = h.call(t, "POST", "/runs/"+runID+"/regenerate?wait=30s", "")
		if code != http.StatusOK && code != http.StatusCreated && code != http.StatusAccepted {
			t.Fatalf("regenerate: %d %v", code, out)
		}
		seq = int64(out["seq"].(float64))
		waitHandled(t, st, runID, seq, 30*time.Second)
		attachmentsOf("regenerated", catID)

		// Refused, storing nothing: another person's attachment, and an
		// edit left with neither text nor attachments.
		mallory := asUser(t, h, identity.Principal{Issuer: "https://issuer.test", Tenant: "t", ObjectID: "mallory"})
		_, other := upload(t, mallory, "theirs.txt", "text/plain", []byte("mallory's"))
		before, _ := st.GetRun(t.Context(), runID)
		for body, want := range map[string]string{
			`{"content": "x", "attachments": ["` + other["id"].(string) + `"]}`:   "invalid_attachments",
			`{"content": "x", "attachments": ["` + catID + `", "` + catID + `"]}`: "invalid_attachments",
			`{"content": " ", "attachments": []}`:                                 "invalid_message",
			`{"content": "x", "attachments": "` + catID + `"}`:                    "invalid_json",
		} {
			code, out := h.call(t, "POST", "/runs/"+runID+"/messages/"+strconv.FormatInt(seq, 10)+"/edit", body)
			if e, _ := out["error"].(map[string]any); code != http.StatusBadRequest || e["code"] != want {
				t.Errorf("edit %s: %d %v, want 400 %s", body, code, out, want)
			}
		}
		if r, _ := st.GetRun(t.Context(), runID); r.LastSeq != before.LastSeq {
			t.Errorf("refused edits stored events: last seq %d, was %d", r.LastSeq, before.LastSeq)
		}
		if g, _ := st.GetAttachment(t.Context(), other["id"].(string)); g.RunID != "" {
			t.Errorf("a refused edit bound another person's attachment to %q", g.RunID)
		}

		// Kept and added; then the image removed; the notes without
		// text; then none, the text alone.
		edit("added", `{"content": "and my notes", "attachments": ["`+catID+`", "`+notesID+`"]}`, catID, notesID)
		edit("removed", `{"content": "just the notes", "attachments": ["`+notesID+`"]}`, notesID)
		edit("no text", `{"content": "", "attachments": ["`+notesID+`"]}`, notesID)
		edit("none", `{"content": "no files", "attachments": []}`)
		// The image removed from the line stays the run's: its URL still
		// answers.
		if resp, err := http.Get(h.api + "/attachments/" + catID); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("the removed image's URL: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
	})
}

// TestAttachmentsOpenRun: a run's opening message (POST /runs) sends
// attachments as a later message does; a retry with its Idempotency-Key
// answers the same run; another person's attachment is refused and
// nothing is created.
func TestAttachmentsOpenRun(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, st store.Store) {
		h := newHarness(t, st, model.NewDemo(), nil)
		_, a := upload(t, h.api, "cat.png", "image/png", testImage(t, "png"))
		mallory := asUser(t, h, identity.Principal{Issuer: "https://issuer.test", Tenant: "t", ObjectID: "mallory"})
		_, other := upload(t, mallory, "theirs.txt", "text/plain", []byte("mallory's"))
		code, out := h.call(t, "POST", "/runs", `{"message": "", "attachments": ["`+other["id"].(string)+`"]}`)
		if e, _ := out["error"].(map[string]any); code != http.StatusBadRequest || e["code"] != "invalid_attachments" {
			t.Errorf("another's attachment: %d %v", code, out)
		}
		if runs, _ := st.ListRuns(t.Context(), testOwner.ID()); len(runs) != 0 {
			t.Fatalf("a refused creation stored %d runs", len(runs))
		}
		body := `{"message": "", "attachments": ["` + a["id"].(string) + `"]}`
		code, out = h.call(t, "POST", "/runs", body, "Idempotency-Key", "open-1")
		if code != http.StatusCreated || out["title"] != "cat.png" {
			t.Fatalf("POST /runs with an attachment: %d %v", code, out)
		}
		runID := out["runId"].(string)
		if code, again := h.call(t, "POST", "/runs", body, "Idempotency-Key", "open-1"); code != http.StatusOK || again["runId"] != runID {
			t.Errorf("the retry: %d %v, want 200 and the same run", code, again)
		}
		if g, _ := st.GetAttachment(t.Context(), a["id"].(string)); g.RunID != runID {
			t.Errorf("the attachment is bound to %q, want %s", g.RunID, runID)
		}
		if code, out := h.call(t, "POST", "/runs", body, "Idempotency-Key", "open-2"); code != http.StatusBadRequest {
			t.Errorf("the attachment sent again by another run: %d %v", code, out)
		}
		events, _ := st.ListEvents(t.Context(), runID, 0, 10)
		var m UserMessage
		if len(events) == 0 || json.Unmarshal(events[0].Payload, &m) != nil || len(m.Attachments) != 1 || m.Attachments[0].ID != a["id"] {
			t.Errorf("the opening message = %s", events[0].Payload)
		}
	})
}

// TestAttachmentsSummarised: the summariser reads a message's attachments
// as placeholders naming them, never their content or where they are kept.
func TestAttachmentsSummarised(t *testing.T) {
	t.Parallel()
	e := store.Event{Seq: 3, Type: EventUserMessage, Payload: mustJSON(UserMessage{Content: "see these",
		Attachments: []AttachmentRef{{ID: "att_1", Name: "cat.png", Type: "image/png", Size: 10}, {ID: "att_2", Name: "a.csv", Type: "text/csv", Size: 4}}})}
	got, err := renderEntry(e)
	want := "[user] see these\n[image: \"cat.png\", image/png, 10 bytes]\n[file: \"a.csv\", text/csv, 4 bytes]"
	if err != nil || got != want {
		t.Errorf("renderEntry = %q, %v; want %q", got, err, want)
	}
}
