package assistant

import (
	"bytes"
	"encoding/binary"
	"image"
	_ "image/gif"  // GIF headers, for image.DecodeConfig
	_ "image/jpeg" // JPEG headers
	_ "image/png"  // PNG headers
	"mime"
	"net/http"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/httpx"
)

// MaxImagePixels bounds an attached image's width times height: a small
// file may declare an image of billions of pixels (an image bomb), which
// whoever decodes it (a browser, a model server) would have to hold.
const MaxImagePixels = 50_000_000

// maxAttachmentName bounds an attachment's file name, in bytes.
const maxAttachmentName = 255

// imageTypes are the image types people may attach, by extension.
var imageTypes = map[string]string{
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp", ".gif": "image/gif",
}

// textTypes are the text-like files people may attach, by extension, with
// the type they are stored as: plain text, Markdown, CSV, JSON and source
// code (as text/plain).
var textTypes = map[string]string{
	".txt": "text/plain", ".text": "text/plain", ".log": "text/plain",
	".md": "text/markdown", ".markdown": "text/markdown",
	".csv": "text/csv", ".tsv": "text/tab-separated-values",
	".json": "application/json",
}

// sourceExts are source code and configuration files, stored as
// text/plain.
var sourceExts = []string{
	".go", ".py", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".java", ".kt", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs",
	".rs", ".rb", ".php", ".swift", ".scala", ".sh", ".bash", ".ps1", ".sql", ".yaml", ".yml", ".toml", ".ini",
	".xml", ".html", ".css", ".scss", ".proto", ".graphql", ".tf", ".lua", ".r", ".m", ".pl", ".dart", ".vue",
	".svelte", ".diff", ".patch", ".cedar", ".env", ".cfg", ".conf", ".gradle", ".mk",
}

func init() {
	for _, ext := range sourceExts {
		textTypes[ext] = "text/plain"
	}
}

// Refusals of an upload: each says what to do in words a person reads.
var (
	errAttachmentEmpty = httpx.Errorf(http.StatusBadRequest, "empty_attachment", "The file is empty.")
	errAttachmentName  = httpx.Errorf(http.StatusBadRequest, "invalid_attachment_name",
		"The file name must be at most 255 bytes of text, without a path (/ or \\) or control characters.")
	errAttachmentType = httpx.Errorf(http.StatusUnsupportedMediaType, "unsupported_attachment",
		"Attach images (PNG, JPEG, WebP, GIF) or text files (plain text, Markdown, CSV, JSON, source code).")
	errAttachmentForged = httpx.Errorf(http.StatusUnsupportedMediaType, "attachment_type_mismatch",
		"The file's content is not what its name and type say it is.")
	errAttachmentPolyglot = httpx.Errorf(http.StatusUnsupportedMediaType, "attachment_type_mismatch",
		"The image carries data after its end: it is more than an image.")
	errImageTooLarge = httpx.Errorf(http.StatusBadRequest, "image_too_large",
		"The image is larger than 50 megapixels, or its size cannot be read.")
	errTextNotText = httpx.Errorf(http.StatusUnsupportedMediaType, "attachment_type_mismatch",
		"A text file must be UTF-8 text without NUL or other control characters.")
)

// checkAttachmentName refuses a name that is not a plain file name.
func checkAttachmentName(name string) error {
	switch {
	case name == "", len(name) > maxAttachmentName, !utf8.ValidString(name),
		name == ".", name == "..", strings.TrimSpace(name) != name,
		strings.ContainsAny(name, `/\`),
		strings.ContainsFunc(name, func(r rune) bool { return unicode.IsControl(r) || r == utf8.RuneError }):
		return errAttachmentName
	}
	return nil
}

// classify checks an upload — its name, the type its client declared ("" or
// application/octet-stream: none) and its content — and returns the type
// it is stored as. It is the server's decision, whatever the client
// checked: the extension names the kind, a declared type must agree with
// it, and the content must be what both say (sniffed, and for an image its
// header decoded, its size bounded and nothing after its end).
func classify(name, declared string, data []byte) (string, error) {
	if err := checkAttachmentName(name); err != nil {
		return "", err
	}
	if len(data) == 0 {
		return "", errAttachmentEmpty
	}
	if declared != "" {
		mt, _, err := mime.ParseMediaType(declared)
		if err != nil {
			return "", errAttachmentForged
		}
		declared = mt
	}
	if declared == "application/octet-stream" {
		declared = ""
	}
	ext := strings.ToLower(path.Ext(name))
	if typ, ok := imageTypes[ext]; ok {
		if declared != "" && declared != typ && !(typ == "image/jpeg" && declared == "image/jpg") {
			return "", errAttachmentForged
		}
		return typ, checkImage(typ, data)
	}
	typ, ok := textTypes[ext]
	if !ok {
		return "", errAttachmentType
	}
	if declared != "" && !textLike(declared) {
		return "", errAttachmentForged
	}
	return typ, checkTextFile(data)
}

// textLike reports whether a declared type may name a text file: browsers
// declare source code in many ways (text/x-go, application/javascript), and
// none at all for many.
func textLike(t string) bool {
	if strings.HasPrefix(t, "text/") {
		return true
	}
	sub, ok := strings.CutPrefix(t, "application/")
	if !ok {
		return false
	}
	switch sub {
	case "json", "xml", "javascript", "yaml", "toml", "sql", "graphql", "ld+json", "x-yaml", "x-sh", "x-httpd-php",
		"x-python", "x-ruby", "x-perl", "x-javascript", "typescript", "x-typescript", "x-tex", "x-ndjson":
		return true
	}
	return false
}

// checkTextFile refuses content that is not plain UTF-8 text, or that a
// browser would take for something else (a forged type).
func checkTextFile(data []byte) error {
	if !utf8.Valid(data) || bytes.ContainsFunc(data, func(r rune) bool {
		return unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' && r != '\f'
	}) {
		return errTextNotText
	}
	if !strings.HasPrefix(http.DetectContentType(data), "text/") {
		return errAttachmentForged
	}
	return nil
}

// checkImage checks that data is an image of typ: the sniffed type, the
// decoded header's format and size, and its end.
func checkImage(typ string, data []byte) error {
	if http.DetectContentType(data) != typ {
		return errAttachmentForged
	}
	var w, h int
	if typ == "image/webp" {
		var ok bool
		if w, h, ok = webpSize(data); !ok {
			return errAttachmentForged
		}
	} else {
		cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
		if err != nil || "image/"+format != typ {
			return errAttachmentForged
		}
		w, h = cfg.Width, cfg.Height
	}
	if w <= 0 || h <= 0 || int64(w)*int64(h) > MaxImagePixels {
		return errImageTooLarge
	}
	if !endsWhole(typ, data) {
		return errAttachmentPolyglot
	}
	return nil
}

// endsWhole reports whether the image ends where its format ends it: a
// file that goes on after (a ZIP, a script or HTML appended: a polyglot)
// is refused.
func endsWhole(typ string, data []byte) bool {
	switch typ {
	case "image/png":
		return bytes.HasSuffix(data, []byte{0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82})
	case "image/jpeg":
		return bytes.HasSuffix(data, []byte{0xFF, 0xD9})
	case "image/gif":
		return bytes.HasSuffix(data, []byte{0x3B})
	case "image/webp":
		// The RIFF header gives the size of what follows it.
		return len(data) >= 12 && int64(binary.LittleEndian.Uint32(data[4:8]))+8 == int64(len(data))
	}
	return false
}

// webpSize reads a WebP image's canvas size from its first chunk (VP8X,
// VP8L or VP8), without decoding it.
func webpSize(data []byte) (w, h int, ok bool) {
	if len(data) < 30 || string(data[0:4]) != "RIFF" || string(data[8:12]) != "WEBP" {
		return 0, 0, false
	}
	switch string(data[12:16]) {
	case "VP8X":
		w = 1 + int(uint32(data[24])|uint32(data[25])<<8|uint32(data[26])<<16)
		h = 1 + int(uint32(data[27])|uint32(data[28])<<8|uint32(data[29])<<16)
		return w, h, true
	case "VP8L":
		if data[20] != 0x2F {
			return 0, 0, false
		}
		b := binary.LittleEndian.Uint32(data[21:25])
		return 1 + int(b&0x3FFF), 1 + int((b>>14)&0x3FFF), true
	case "VP8 ":
		if data[23] != 0x9D || data[24] != 0x01 || data[25] != 0x2A {
			return 0, 0, false
		}
		return int(binary.LittleEndian.Uint16(data[26:28]) & 0x3FFF), int(binary.LittleEndian.Uint16(data[28:30]) & 0x3FFF), true
	}
	return 0, 0, false
}
