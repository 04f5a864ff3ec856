package assistant

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Titles and previews are plain text: what a listing shows of a message
// written in Markdown, without its markup.

var (
	// mdLink is a Markdown link or image: [text](target) or ![alt](target).
	mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	// mdLinePrefix is what starts a Markdown block line: a heading, a
	// quote, a list item, a task box.
	mdLinePrefix = regexp.MustCompile(`^\s*(?:#{1,6}\s+|>\s*|[-*+]\s+(?:\[[ xX]\]\s+)?|\d+[.)]\s+)+`)
	// mdFence is a code fence line.
	mdFence = regexp.MustCompile("^\\s*(```|~~~)")
	// mdEmphasis is the emphasis and code markers around text: **, __,
	// *, _, ~~ and backticks.
	mdEmphasis = regexp.MustCompile("~~|`+|(^|[\\s(])(\\*\\*|__|\\*|_)|(\\*\\*|__|\\*|_)([\\s).,:;!?]|$)")
)

// plainText is text written in Markdown as one line of plain text: the
// markup of links, images, headings, quotes, list items, code fences and
// emphasis removed, whitespace collapsed.
func plainText(md string) string {
	var lines []string
	for line := range strings.Lines(md) {
		if mdFence.MatchString(line) {
			continue
		}
		line = mdLinePrefix.ReplaceAllString(line, "")
		line = mdLink.ReplaceAllString(line, "$1")
		line = mdEmphasis.ReplaceAllStringFunc(line, func(m string) string {
			return strings.Map(func(r rune) rune {
				if r == '*' || r == '_' || r == '~' || r == '`' {
					return -1
				}
				return r
			}, m)
		})
		lines = append(lines, line)
	}
	return strings.Join(strings.Fields(strings.Join(lines, " ")), " ")
}

// maxTitleFrom is the most characters of a title made from a message.
const maxTitleFrom = 80

// titleFrom makes a title of a message: its first line with text, as plain
// text, cut after maxTitleFrom characters at a word's end when there is one
// near, with "…".
func titleFrom(message string) string {
	var first string
	for line := range strings.Lines(message) {
		if mdFence.MatchString(line) {
			continue
		}
		if first = plainText(line); first != "" {
			break
		}
	}
	if utf8.RuneCountInString(first) <= maxTitleFrom {
		return first
	}
	r := []rune(first)[:maxTitleFrom-1]
	if i := strings.LastIndexByte(string(r), ' '); i >= len(string(r))*2/3 {
		return strings.TrimRight(string(r)[:i], " ,.;:") + "…"
	}
	return string(r) + "…"
}
