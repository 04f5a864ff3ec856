package assistant

import (
	"bytes"
	"image"
	"strings"
	"testing"
)

// FuzzClassify: whatever an upload holds, classify never panics, and what
// it takes is a type it names, with a plain name, and — for an image — a
// header that decodes within MaxImagePixels, or — for text — UTF-8; and
// an image without its metadata (stripMetadata, which never panics
// either) is still one it takes, as the same type.
func FuzzClassify(f *testing.F) {
	f.Add("cat.png", "image/png", testImage(f, "png"))
	f.Add("cat.gif", "", testImage(f, "gif"))
	f.Add("cat.jpg", "image/jpeg", testImage(f, "jpeg"))
	f.Add("bomb.webp", "image/webp", webpBomb(10_000, 10_000))
	f.Add("small.webp", "", webpBomb(10, 10))
	f.Add("notes.md", "text/markdown", []byte("# notes\n"))
	f.Add("a.json", "application/json; charset=utf-8", []byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, name, declared string, data []byte) {
		typ, err := classify(name, declared, data)
		if err != nil {
			return
		}
		if strings.HasPrefix(typ, "image/") {
			if again, err := classify(name, declared, stripMetadata(typ, data)); err != nil || again != typ {
				t.Fatalf("the %s without its metadata is taken as %q, %v", typ, again, err)
			}
		}
		if checkAttachmentName(name) != nil || len(data) == 0 {
			t.Fatalf("took %q (%d bytes) with a bad name or no content", name, len(data))
		}
		switch {
		case typ == "image/webp":
			if w, h, ok := webpSize(data); !ok || int64(w)*int64(h) > MaxImagePixels {
				t.Fatalf("took a WebP of %d×%d", w, h)
			}
		case strings.HasPrefix(typ, "image/"):
			cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
			if err != nil || int64(cfg.Width)*int64(cfg.Height) > MaxImagePixels {
				t.Fatalf("took an image of %d×%d (%v)", cfg.Width, cfg.Height, err)
			}
		default:
			if checkTextFile(data) != nil {
				t.Fatalf("took text that is not text: %q", data)
			}
		}
	})
}
