package audit

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/usherhq/usher/store"
)

// AppendRecord appends r to dst as Line writes it, without the newline:
// one JSON object, keys sorted. It writes the fields directly, in the
// escaping the package documentation defines (Go's encoding/json with HTML
// escaping off), and takes r.Details as they are when they are already in
// their canonical form, as the details of every record this package builds
// are; only other details are parsed and written again. It fails only when
// r.Details is not JSON, and then returns dst unchanged.
func AppendRecord(dst []byte, r store.AuditRecord) ([]byte, error) {
	details, err := canonicalDetails(r.Details)
	if err != nil {
		return dst, fmt.Errorf("record %d: %w", r.Seq, err)
	}
	// The keys in byte order, as the exported struct's fields are.
	dst = append(dst, `{"approval_id":`...)
	dst = appendString(dst, r.ApprovalID)
	dst = append(dst, `,"arguments_hash":`...)
	dst = appendString(dst, r.ArgumentsHash)
	dst = append(dst, `,"at":"`...)
	// The layout writes digits, '-', 'T', ':', '.' and 'Z': nothing to
	// escape.
	dst = appendTime(dst, r.At)
	dst = append(dst, `","client_id":`...)
	dst = appendString(dst, r.ClientID)
	dst = append(dst, `,"decision":`...)
	dst = appendString(dst, r.Decision)
	dst = append(dst, `,"definition_hash":`...)
	dst = appendString(dst, r.DefinitionHash)
	dst = append(dst, `,"details":`...)
	dst = append(dst, details...)
	if r.EventID != "" {
		dst = append(dst, `,"event_id":`...)
		dst = appendString(dst, r.EventID)
	}
	dst = append(dst, `,"hash":`...)
	dst = appendString(dst, r.Hash)
	dst = append(dst, `,"kind":`...)
	dst = appendString(dst, r.Kind)
	dst = append(dst, `,"latency_us":`...)
	dst = strconv.AppendInt(dst, r.Latency.Microseconds(), 10)
	dst = append(dst, `,"outcome":`...)
	dst = appendString(dst, r.Outcome)
	dst = append(dst, `,"policy_hash":`...)
	dst = appendString(dst, r.PolicyHash)
	dst = append(dst, `,"policy_ids":[`...)
	for i, id := range r.PolicyIDs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, id)
	}
	dst = append(dst, `],"prev_hash":`...)
	dst = appendString(dst, r.PrevHash)
	dst = append(dst, `,"principal":`...)
	dst = appendString(dst, r.Principal)
	dst = append(dst, `,"run_id":`...)
	dst = appendString(dst, r.RunID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, r.Seq, 10)
	dst = append(dst, `,"token_jti":`...)
	dst = appendString(dst, r.TokenJTI)
	dst = append(dst, `,"tool":`...)
	dst = appendString(dst, r.Tool)
	return append(dst, '}'), nil
}

// Constants of plainWord's tests of eight bytes at once.
const (
	ones   = 0x0101010101010101
	highs  = 0x8080808080808080
	quotes = '"' * ones
	slashs = '\\' * ones
)

// plainWord reports whether the eight bytes of s at i are all ASCII that
// appendString writes as themselves: none is below 0x20, '"', '\\' or
// 0x80 and above. Each test is the bit trick of "Bit Twiddling Hacks"
// (a byte below n; a zero byte), which is exact for "any byte".
func plainWord(s string, i int) bool {
	w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
	q, b := w^quotes, w^slashs
	odd := w | // 0x80 and above
		(w-0x20*ones) & ^w | // below 0x20
		(q-ones) & ^q | // '"'
		(b-ones) & ^b // '\\'
	return odd&highs == 0
}

// appendTime appends t in UTC in timeLayout, as AppendFormat does, digit
// by digit: the layout's general formatter is the larger part of a
// record's line otherwise.
func appendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(dst, timeLayout)
	}
	hour, minute, sec := t.Clock()
	dst = appendDigits(dst, year, 4)
	dst = append(dst, '-')
	dst = appendDigits(dst, int(month), 2)
	dst = append(dst, '-')
	dst = appendDigits(dst, day, 2)
	dst = append(dst, 'T')
	dst = appendDigits(dst, hour, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, minute, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, sec, 2)
	dst = append(dst, '.')
	dst = appendDigits(dst, t.Nanosecond()/1000, 6)
	return append(dst, 'Z')
}

// appendDigits appends n (0 or more) as exactly width decimal digits.
func appendDigits(dst []byte, n, width int) []byte {
	dst = append(dst, "000000"[:width]...)
	for i := len(dst) - 1; n > 0 && i >= len(dst)-width; i-- {
		dst[i] = byte('0' + n%10)
		n /= 10
	}
	return dst
}

// hexDigits are the digits of the \u escapes appendString writes.
const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json writes it
// with HTML escaping off: \" and \\, \b \f \n \r \t, \u00xx for other
// control characters, \u2028 and \u2029, \ufffd for each byte that is not
// part of valid UTF-8, and everything else as itself.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Most texts (hashes, ids, names) are plain ASCII: skip them a
		// word at a time.
		for i+8 <= len(s) && plainWord(s, i) {
			i += 8
		}
		if i == len(s) {
			break
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// isCanonicalJSON reports whether v is one JSON value exactly as
// canonicalDetails writes it, so that it need not be parsed and written
// again: no whitespace, the keys of each object in strictly increasing byte
// order, and strings escaped as appendString escapes them. It may say no
// to a value that is canonical (such as one with an escaped character in a
// key); it never says yes to one that is not.
// It checks that v is JSON as it goes, nested at most maxCanonicalDepth
// deep.
func isCanonicalJSON(v []byte) bool {
	end, ok := canonicalValue(v, 0, 0)
	return ok && end == len(v)
}

// maxCanonicalDepth is the deepest nesting isCanonicalJSON takes; deeper
// details take the long way, whose decoder has limits of its own.
const maxCanonicalDepth = 100

// canonicalValue checks the canonical value at v[i], nested depth deep,
// and returns where it ends.
func canonicalValue(v []byte, i, depth int) (int, bool) {
	if i >= len(v) {
		return i, false
	}
	switch c := v[i]; {
	case c == '{' || c == '[':
		if depth >= maxCanonicalDepth {
			return i, false
		}
		if c == '{' {
			return canonicalObject(v, i, depth+1)
		}
		return canonicalArray(v, i, depth+1)
	case c == '"':
		end, _, ok := canonicalString(v, i)
		return end, ok
	case c == 't':
		return literal(v, i, "true")
	case c == 'f':
		return literal(v, i, "false")
	case c == 'n':
		return literal(v, i, "null")
	case c == '-' || isDigit(c):
		// Numbers are kept as written.
		return jsonNumber(v, i)
	default:
		// Whitespace, which the canonical form has none of.
		return i, false
	}
}

// jsonNumber checks the JSON number at v[i] and returns where it ends:
// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func jsonNumber(v []byte, i int) (int, bool) {
	if i < len(v) && v[i] == '-' {
		i++
	}
	switch {
	case i < len(v) && v[i] == '0':
		i++
	case i < len(v) && '1' <= v[i] && v[i] <= '9':
		i = digits(v, i)
	default:
		return i, false
	}
	if i < len(v) && v[i] == '.' {
		if i++; i >= len(v) || !isDigit(v[i]) {
			return i, false
		}
		i = digits(v, i)
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		if i++; i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		if i >= len(v) || !isDigit(v[i]) {
			return i, false
		}
		i = digits(v, i)
	}
	return i, true
}

// digits is where the run of digits at v[i] ends.
func digits(v []byte, i int) int {
	for i < len(v) && isDigit(v[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// literal checks that v holds word at i.
func literal(v []byte, i int, word string) (int, bool) {
	if len(v)-i < len(word) || string(v[i:i+len(word)]) != word {
		return i, false
	}
	return i + len(word), true
}

// canonicalObject checks the object at v[i] == '{', nested depth deep.
func canonicalObject(v []byte, i, depth int) (int, bool) {
	i++
	if i < len(v) && v[i] == '}' {
		return i + 1, true
	}
	var prev []byte
	for first := true; ; first = false {
		if i >= len(v) || v[i] != '"' {
			return i, false
		}
		end, escaped, ok := canonicalString(v, i)
		if !ok || escaped {
			return i, false
		}
		// The keys are sorted by their text, which a key without escapes
		// is byte for byte.
		key := v[i+1 : end-1]
		if !first && bytes.Compare(prev, key) >= 0 {
			return i, false
		}
		prev = key
		if i = end; i >= len(v) || v[i] != ':' {
			return i, false
		}
		if i, ok = canonicalValue(v, i+1, depth); !ok || i >= len(v) {
			return i, false
		}
		switch v[i] {
		case ',':
			i++
		case '}':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// canonicalArray checks the array at v[i] == '[', nested depth deep.
func canonicalArray(v []byte, i, depth int) (int, bool) {
	i++
	if i < len(v) && v[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = canonicalValue(v, i, depth); !ok || i >= len(v) {
			return i, false
		}
		switch v[i] {
		case ',':
			i++
		case ']':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// canonicalString checks the string at v[i] == '"': each escape one that
// appendString writes for the character it stands for, and no character
// that appendString escapes written as itself. It returns where the string
// ends and whether it has escapes.
func canonicalString(v []byte, i int) (end int, escaped, ok bool) {
	for i++; i < len(v); {
		c := v[i]
		switch {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			escaped = true
			n := canonicalEscape(v[i:])
			if n == 0 {
				return i, escaped, false
			}
			i += n
		case c < 0x20:
			return i, escaped, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(v[i:])
			if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
				return i, escaped, false
			}
			i += size
		}
	}
	return i, escaped, false
}

// canonicalEscape is the length of the escape at the start of e if it is
// one appendString writes, else 0.
func canonicalEscape(e []byte) int {
	if len(e) < 2 {
		return 0
	}
	switch e[1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(e) < 6 {
			return 0
		}
		switch u := string(e[2:6]); {
		case u == "2028" || u == "2029":
			return 6
		case u[0] == '0' && u[1] == '0' && isLowerHex(u[2]) && isLowerHex(u[3]):
			c := unhex(u[2])<<4 | unhex(u[3])
			if c < 0x20 && c != '\b' && c != '\f' && c != '\n' && c != '\r' && c != '\t' {
				return 6
			}
		}
	}
	return 0
}

func isLowerHex(c byte) bool { return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}
