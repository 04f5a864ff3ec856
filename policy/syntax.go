package policy

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// byteOrderMark is U+FEFF at the start of a file, which some editors
// write and Cedar does not accept.
var byteOrderMark = []byte("\xef\xbb\xbf")

// The shapes of cedar-go's syntax errors: the parser's names the token it
// stopped at, the scanner's only a position. Both say <input> for the file.
var (
	parserError  = regexp.MustCompile(`^(?:parser error: )?parse error at <input>:(\d+):(\d+) ("(?:[^"\\]|\\.)*"): (.*)$`)
	scannerError = regexp.MustCompile(`^(?:parser error: )?<input>:(\d+):(\d+): (.*)$`)
	expected     = regexp.MustCompile(`^exact got (.*) want (.*)$`)
)

// syntaxError rewords cedar-go's error for src, a file that does not
// parse, for the person who has to fix it: the file's name, where the
// mistake is (for a missing token, just after the token before it) and
// any invisible character by its code point. Cedar's parser stops at the
// first syntax error, so that is the only one.
func syntaxError(name string, src []byte, err error) error {
	msg := err.Error()
	if m := parserError.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		col, _ := strconv.Atoi(m[2])
		tok, _ := strconv.Unquote(m[3])
		if e := expected.FindStringSubmatch(m[4]); e != nil {
			return missingToken(name, src, offsetOf(src, line, col), e[1], e[2])
		}
		return fmt.Errorf("%s:%d:%d: syntax error at or just before %s: %s",
			name, line, col, describeToken(tok), showInvisible(m[4]))
	}
	if m := scannerError.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s:%s:%s: syntax error: %s", name, m[1], m[2], m[3])
	}
	return fmt.Errorf("%s: %s", name, strings.TrimPrefix(msg, "parser error: "))
}

// missingToken reports that want was expected where got was found; the
// parser stopped at the token after got, at offset next. The mistake is
// placed just after the token before got when that ends on an earlier
// line (a statement without its semicolon), else at got.
func missingToken(name string, src []byte, next int, got, want string) error {
	at := bytes.LastIndex(src[:next], []byte(got))
	if got == "" || at < 0 {
		at = next
	}
	found := "found " + describeToken(got)
	where := at
	if prevEnd := len(bytes.TrimRightFunc(src[:at], unicode.IsSpace)); prevEnd > 0 && bytes.Contains(src[prevEnd:at], []byte("\n")) {
		where = prevEnd
		found += fmt.Sprintf(" at %s (does the statement end without it?)", lineColumn(src, at))
	}
	return fmt.Errorf("%s:%s: syntax error: expected %q here, %s",
		name, lineColumn(src, where), want, found)
}

// describeToken quotes tok, naming the invisible characters in it (a
// zero-width space, a byte order mark) by their code points.
func describeToken(tok string) string {
	var hidden []string
	for _, c := range tok {
		if invisible(c) {
			hidden = append(hidden, fmt.Sprintf("U+%04X", c))
		}
	}
	if len(hidden) == 0 {
		return strconv.Quote(tok)
	}
	return fmt.Sprintf("%+q (the invisible character %s)", tok, strings.Join(hidden, ", "))
}

// offsetOf returns the byte offset of line:column (1-based, the column
// in characters) in src.
func offsetOf(src []byte, line, column int) int {
	off := 0
	for ; line > 1; line-- {
		i := bytes.IndexByte(src[off:], '\n')
		if i < 0 {
			return len(src)
		}
		off += i + 1
	}
	for ; column > 1 && off < len(src); column-- {
		_, size := utf8.DecodeRune(src[off:])
		off += size
	}
	return off
}

// lineColumn is line:column of src[at], as Cedar counts them.
func lineColumn(src []byte, at int) string {
	return fmt.Sprintf("%d:%d", bytes.Count(src[:at], []byte("\n"))+1, columnAt(src, at))
}

// showInvisible writes each invisible character of s as <U+XXXX>.
func showInvisible(s string) string {
	var b strings.Builder
	for _, c := range s {
		if invisible(c) && c != ' ' {
			fmt.Fprintf(&b, "<U+%04X, an invisible character>", c)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// invisible reports whether c shows as nothing, or as a blank, in an
// editor: a format character (U+FEFF, U+200B, bidi controls), a control
// or a space.
func invisible(c rune) bool {
	return unicode.Is(unicode.Cf, c) || !unicode.IsGraphic(c) || unicode.IsSpace(c)
}

// MaxFileSize is the largest policy file Load and Parse accept, 1 MiB:
// far more than any policy a person reviews, and a bound on the work of
// parsing one.
const MaxFileSize = 1 << 20

// maxNesting is how deep brackets ((, [, {) and unary operators (!, -)
// may nest in a policy file. Cedar's parser, validator and evaluator
// recurse per level, so a file of a million "(" would exhaust the stack
// and take the process down instead of being refused.
const maxNesting = 64

// checkShape refuses, before Cedar parses src, a file larger than
// MaxFileSize or nested deeper than maxNesting.
func checkShape(name string, src []byte) error {
	if len(src) > MaxFileSize {
		return fmt.Errorf("%s is larger than %d bytes (1 MiB), the most a policy file may have", name, MaxFileSize)
	}
	depth, unary := 0, 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '"':
			i = skipString(src, i)
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case c == '!' || c == '-':
			unary++
		}
		if c != '!' && c != '-' && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			unary = 0
		}
		if depth+unary > maxNesting {
			return fmt.Errorf("%s:%s: brackets and unary operators nest more than %d deep here; a policy may nest at most %d", name, lineColumn(src, i), maxNesting, maxNesting)
		}
	}
	return nil
}
