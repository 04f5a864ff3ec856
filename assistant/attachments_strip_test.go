package assistant

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"io"
	"net/http"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/store/storetest"
)

// The metadata the tests put in images, each of which must not survive.
var (
	gpsMark     = []byte("GPS-48.8584N-2.2945E")
	commentMark = []byte("a comment naming alice")
	iptcMark    = []byte("Photoshop 3.0\x00IPTC by alice")
	textMark    = []byte("Author\x00alice")
	xmpMark     = []byte("<x:xmpmeta>alice</x:xmpmeta>")
)

// exifSegment is an APP1 EXIF segment (little-endian TIFF) whose first
// directory gives the orientation o and points at a GPS directory
// holding gpsMark.
func exifSegment(o uint16) []byte {
	le := binary.LittleEndian
	tiff := []byte{'I', 'I', 42, 0, 8, 0, 0, 0}
	ifd := make([]byte, 2+2*12+4)
	le.PutUint16(ifd, 2)
	// Orientation: SHORT, one value.
	le.PutUint16(ifd[2:], 0x0112)
	le.PutUint16(ifd[4:], 3)
	le.PutUint32(ifd[6:], 1)
	le.PutUint16(ifd[10:], o)
	// GPS directory pointer: LONG, one value, after this directory.
	le.PutUint16(ifd[14:], 0x8825)
	le.PutUint16(ifd[16:], 4)
	le.PutUint32(ifd[18:], 1)
	le.PutUint32(ifd[22:], uint32(len(tiff)+len(ifd)))
	payload := append(append(append([]byte("Exif\x00\x00"), tiff...), ifd...), gpsMark...)
	return jpegSegment(0xE1, payload)
}

// jpegSegment is a segment of marker with payload.
func jpegSegment(marker byte, payload []byte) []byte {
	seg := []byte{0xFF, marker, 0, 0}
	binary.BigEndian.PutUint16(seg[2:], uint16(2+len(payload)))
	return append(seg, payload...)
}

// pngChunk is a PNG chunk of typ with data, and its CRC.
func pngChunk(typ string, data []byte) []byte {
	c := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	c = append(append(c, typ...), data...)
	return binary.BigEndian.AppendUint32(c, crc32.ChecksumIEEE(c[4:]))
}

// decodes fails the test unless data decodes as the test image does.
func decodes(t *testing.T, what string, data []byte) {
	t.Helper()
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil || img.Bounds() != image.Rect(0, 0, 4, 3) {
		t.Errorf("%s does not decode as the image: %v", what, err)
	}
}

// holds fails the test when data holds one of marks.
func holds(t *testing.T, what string, data []byte, marks ...[]byte) {
	t.Helper()
	for _, m := range marks {
		if bytes.Contains(data, m) {
			t.Errorf("%s still holds %q", what, m)
		}
	}
}

// TestStripJPEG: a photo's EXIF (but its orientation), comments, IPTC
// and XMP are removed; its colour profile stays; the image decodes the
// same; stripping again changes nothing.
func TestStripJPEG(t *testing.T) {
	plain := testImage(t, "jpeg")
	icc := jpegSegment(0xE2, []byte("ICC_PROFILE\x00\x01\x01profile"))
	for _, o := range []uint16{6, 1} {
		in := append([]byte{}, plain[:2]...)
		in = append(in, exifSegment(o)...)
		in = append(in, jpegSegment(0xE1, append([]byte("http://ns.adobe.com/xap/1.0/\x00"), xmpMark...))...)
		in = append(in, jpegSegment(0xFE, commentMark)...)
		in = append(in, jpegSegment(0xED, iptcMark)...)
		in = append(in, icc...)
		in = append(in, plain[2:]...)
		decodes(t, "the photo", in)

		out := stripMetadata("image/jpeg", in)
		decodes(t, "the stripped photo", out)
		holds(t, "the stripped photo", out, gpsMark, commentMark, iptcMark, xmpMark)
		if !bytes.Contains(out, icc) {
			t.Error("the colour profile was removed")
		}
		got := uint16(0)
		if i := bytes.Index(out, []byte{0xFF, 0xE1}); i >= 0 {
			got = exifOrientation(out[i+4:])
		}
		if want := map[uint16]uint16{6: 6, 1: 0}[o]; got != want {
			t.Errorf("orientation %d: the stripped photo says %d, want %d (none for the default)", o, got, want)
		}
		if again := stripMetadata("image/jpeg", out); !bytes.Equal(again, out) {
			t.Error("stripping a stripped photo changed it")
		}
		if _, err := classify("photo.jpg", "image/jpeg", out); err != nil {
			t.Errorf("the stripped photo is refused: %v", err)
		}
	}
	if out := stripMetadata("image/jpeg", plain); !bytes.Equal(out, plain) {
		t.Error("an image without metadata changed")
	}
	cut := append(append([]byte{}, plain[:2]...), 0xFF, 0xE1, 0xFF, 0xFF)
	if out := stripMetadata("image/jpeg", cut); !bytes.Equal(out, cut) {
		t.Error("a JPEG whose segment runs past its end was changed, not returned as it was")
	}
}

// TestStripPNG: text chunks, EXIF and the time are removed; the image
// decodes the same.
func TestStripPNG(t *testing.T) {
	plain := testImage(t, "png")
	iend := len(plain) - 12
	in := append([]byte{}, plain[:iend]...)
	in = append(in, pngChunk("tEXt", textMark)...)
	in = append(in, pngChunk("iTXt", append([]byte("XML:com.adobe.xmp\x00\x00\x00\x00\x00"), xmpMark...))...)
	in = append(in, pngChunk("eXIf", append([]byte{'M', 'M', 0, 42}, gpsMark...))...)
	in = append(in, pngChunk("tIME", []byte{7, 234, 12, 7, 10, 0, 0})...)
	in = append(in, plain[iend:]...)
	decodes(t, "the image", in)
	out := stripMetadata("image/png", in)
	decodes(t, "the stripped image", out)
	holds(t, "the stripped image", out, textMark, xmpMark, gpsMark, []byte("tIME"))
	if !bytes.Equal(out, plain) {
		t.Error("the stripped image is not the image without its metadata chunks")
	}
	bad := append([]byte{}, in...)
	bad[len(plain)] ^= 1 // a byte of a chunk's data: its CRC fails
	if out := stripMetadata("image/png", bad); !bytes.Equal(out, bad) {
		t.Error("a PNG with a bad CRC was changed, not returned as it was")
	}
}

// TestStripWebP: the EXIF and XMP chunks go, with their flags, and the
// RIFF size fits what is left.
func TestStripWebP(t *testing.T) {
	plain := webpBomb(4, 3)
	plain[20] |= webpFlagEXIF | webpFlagXMP
	in := append([]byte{}, plain...)
	in = append(in, "EXIF"...)
	in = binary.LittleEndian.AppendUint32(in, uint32(len(gpsMark)+1))
	in = append(append(in, gpsMark...), 'x', 0) // an odd size, padded
	in = append(in, "XMP "...)
	in = binary.LittleEndian.AppendUint32(in, uint32(len(xmpMark)))
	in = append(in, xmpMark...)
	binary.LittleEndian.PutUint32(in[4:8], uint32(len(in)-8))
	if _, err := classify("photo.webp", "image/webp", in); err != nil {
		t.Fatalf("the photo is refused: %v", err)
	}
	out := stripMetadata("image/webp", in)
	holds(t, "the stripped photo", out, gpsMark, xmpMark)
	want := append([]byte{}, plain...)
	want[20] &^= webpFlagEXIF | webpFlagXMP
	if !bytes.Equal(out, want) {
		t.Errorf("the stripped photo = %x, want %x", out, want)
	}
	if _, err := classify("photo.webp", "image/webp", out); err != nil {
		t.Errorf("the stripped photo is refused: %v", err)
	}
}

// TestUploadStripsMetadata: an uploaded photo is stored, and served,
// without its location; the answer's size and hash are the stored file's.
func TestUploadStripsMetadata(t *testing.T) {
	t.Parallel()
	h := newHarness(t, storetest.NewSQLite(t), model.NewDemo(), nil)
	plain := testImage(t, "jpeg")
	photo := append(append(append([]byte{}, plain[:2]...), exifSegment(6)...), plain[2:]...)
	code, out := upload(t, h.api, "photo.jpg", "image/jpeg", photo)
	if code != http.StatusCreated {
		t.Fatalf("upload: %d %v", code, out)
	}
	id, _ := out["id"].(string)
	resp, err := http.Get(h.api + "/attachments/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %d %v", resp.StatusCode, err)
	}
	holds(t, "the served photo", served, gpsMark)
	decodes(t, "the served photo", served)
	if out["size"] != float64(len(served)) {
		t.Errorf("the answer's size %v, want the stored file's %d", out["size"], len(served))
	}
}
