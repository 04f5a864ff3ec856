package assistant

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// Metadata an image carries beside its pixels — where a photo was taken,
// the device, its owner's name, the editing software — is removed before
// the image is stored: the image is sent to the model server, and served
// back, and none of that is what the person meant to send. What decides
// how the pixels look stays: a JPEG's colour profile (APP2), its Adobe
// colour transform (APP14) and its orientation, which is the one EXIF
// field kept (a phone's photo is stored sideways with its orientation
// said there). GIF images are stored as they are: their comments and
// application extensions hold no photo metadata in practice.

// stripMetadata returns data, an image of typ that classify accepted,
// without its metadata (see above). An image it cannot read as its format
// says is returned as it is: classify has refused anything malformed, so
// that does not happen for what it passed.
func stripMetadata(typ string, data []byte) []byte {
	var out []byte
	var ok bool
	switch typ {
	case "image/jpeg":
		out, ok = stripJPEG(data)
	case "image/png":
		out, ok = stripPNG(data)
	case "image/webp":
		out, ok = stripWebP(data)
	}
	if !ok {
		return data
	}
	return out
}

// JPEG markers (ITU T.81 B.1.1.3, and JFIF's application segments).
const (
	jpegSOI   = 0xD8
	jpegSOS   = 0xDA
	jpegAPP1  = 0xE1 // EXIF, XMP
	jpegAPP3  = 0xE3
	jpegAPP14 = 0xEE // Adobe colour transform
	jpegAPP15 = 0xEF
	jpegCOM   = 0xFE
)

// stripJPEG drops the application segments but JFIF's (APP0), the colour
// profile (APP2) and Adobe's (APP14), and every comment, before the scan;
// an EXIF segment is replaced by one holding only its orientation, when
// that is not the default. The scan and what follows are copied as they
// are.
func stripJPEG(data []byte) ([]byte, bool) {
	if len(data) < 4 || data[0] != 0xFF || data[1] != jpegSOI {
		return nil, false
	}
	out := make([]byte, 0, len(data))
	out = append(out, data[:2]...)
	for i := 2; ; {
		if i+4 > len(data) || data[i] != 0xFF {
			return nil, false
		}
		marker := data[i+1]
		if marker == 0xFF { // fill byte
			i++
			continue
		}
		if marker == jpegSOS {
			return append(out, data[i:]...), true
		}
		n := int(binary.BigEndian.Uint16(data[i+2 : i+4]))
		if n < 2 || i+2+n > len(data) {
			return nil, false
		}
		segment := data[i : i+2+n]
		switch {
		case marker == jpegAPP1:
			if o := exifOrientation(segment[4:]); o > 1 {
				out = append(out, orientationSegment(o)...)
			}
		case marker == jpegCOM, marker >= jpegAPP3 && marker <= jpegAPP15 && marker != jpegAPP14:
			// Comments, and APP3 to APP15 but Adobe's (IPTC, camera
			// makers' own): dropped.
		default:
			out = append(out, segment...)
		}
		i += 2 + n
	}
}

// exifOrientation is the orientation (1 to 8) an APP1 payload's EXIF
// gives in its first image directory, or 0 for none.
func exifOrientation(p []byte) uint16 {
	tiff, ok := bytes.CutPrefix(p, []byte("Exif\x00\x00"))
	if !ok || len(tiff) < 8 {
		return 0
	}
	var order binary.ByteOrder
	switch string(tiff[:2]) {
	case "II":
		order = binary.LittleEndian
	case "MM":
		order = binary.BigEndian
	default:
		return 0
	}
	ifd := int(order.Uint32(tiff[4:8]))
	if ifd < 8 || ifd+2 > len(tiff) {
		return 0
	}
	count := int(order.Uint16(tiff[ifd : ifd+2]))
	for k := range count {
		e := ifd + 2 + 12*k
		if e+12 > len(tiff) {
			return 0
		}
		// Tag 0x0112 (Orientation), of type SHORT (3), one value.
		if order.Uint16(tiff[e:e+2]) == 0x0112 && order.Uint16(tiff[e+2:e+4]) == 3 && order.Uint32(tiff[e+4:e+8]) == 1 {
			if o := order.Uint16(tiff[e+8 : e+10]); o >= 1 && o <= 8 {
				return o
			}
			return 0
		}
	}
	return 0
}

// orientationSegment is an APP1 segment whose EXIF holds the orientation
// o alone: a big-endian TIFF header and one directory of one entry.
func orientationSegment(o uint16) []byte {
	tiff := []byte{'M', 'M', 0, 42, 0, 0, 0, 8, // header, directory at 8
		0, 1, // one entry
		0x01, 0x12, 0, 3, 0, 0, 0, 1, byte(o >> 8), byte(o), 0, 0, // Orientation, SHORT, 1, o
		0, 0, 0, 0} // no next directory
	payload := append([]byte("Exif\x00\x00"), tiff...)
	seg := []byte{0xFF, jpegAPP1, 0, 0}
	binary.BigEndian.PutUint16(seg[2:], uint16(2+len(payload)))
	return append(seg, payload...)
}

// pngMetadataChunks are the PNG chunks of text, EXIF and the time of the
// last change (PNG 3rd edition, 11.3.3 and 11.3.6).
var pngMetadataChunks = map[string]bool{"tEXt": true, "zTXt": true, "iTXt": true, "eXIf": true, "tIME": true}

// stripPNG drops the metadata chunks; every other chunk is copied with
// its CRC, checked.
func stripPNG(data []byte) ([]byte, bool) {
	const sig = "\x89PNG\r\n\x1a\n"
	if !bytes.HasPrefix(data, []byte(sig)) {
		return nil, false
	}
	out := make([]byte, 0, len(data))
	out = append(out, sig...)
	for i := len(sig); i < len(data); {
		if i+12 > len(data) {
			return nil, false
		}
		n := int(binary.BigEndian.Uint32(data[i : i+4]))
		if n < 0 || n > len(data)-i-12 {
			return nil, false
		}
		chunk := data[i : i+12+n]
		if crc32.ChecksumIEEE(chunk[4:8+n]) != binary.BigEndian.Uint32(chunk[8+n:]) {
			return nil, false
		}
		if !pngMetadataChunks[string(chunk[4:8])] {
			out = append(out, chunk...)
		}
		i += 12 + n
	}
	return out, true
}

// The VP8X flags of the EXIF and XMP chunks (WebP container, "Extended
// file format").
const (
	webpFlagEXIF = 0x08
	webpFlagXMP  = 0x04
)

// stripWebP drops the EXIF and XMP chunks, clears their flags in the VP8X
// header, and sets the RIFF size to what is left.
func stripWebP(data []byte) ([]byte, bool) {
	if len(data) < 12 || string(data[0:4]) != "RIFF" || string(data[8:12]) != "WEBP" {
		return nil, false
	}
	out := make([]byte, 12, len(data))
	copy(out, data[:12])
	for i := 12; i < len(data); {
		if i+8 > len(data) {
			return nil, false
		}
		n := int(binary.LittleEndian.Uint32(data[i+4 : i+8]))
		size := 8 + n + n%2 // chunks are padded to an even size
		if n < 0 || size > len(data)-i {
			return nil, false
		}
		chunk := data[i : i+size]
		switch string(chunk[:4]) {
		case "EXIF", "XMP ":
		case "VP8X":
			if n < 10 {
				return nil, false
			}
			start := len(out)
			out = append(out, chunk...)
			out[start+8] &^= webpFlagEXIF | webpFlagXMP
		default:
			out = append(out, chunk...)
		}
		i += size
	}
	binary.LittleEndian.PutUint32(out[4:8], uint32(len(out)-8))
	return out, true
}
