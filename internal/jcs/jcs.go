package jcs

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gowebpki/jcs"
)

// MaxDepth is the deepest nesting of arrays and objects Canonicalize
// accepts. Real tool schemas and call arguments stay far below it; the limit
// keeps hostile input from costing stack or time out of proportion to its
// size.
const MaxDepth = 64

// ErrTooDeep is returned (wrapped) for input nested deeper than MaxDepth.
var ErrTooDeep = fmt.Errorf("jcs: nested deeper than %d levels", MaxDepth)

// Canonicalize returns the RFC 8785 canonical form of the JSON text data.
// It returns an error, and no output, for anything that is not a single
// I-JSON value (see the package documentation).
func Canonicalize(data []byte) ([]byte, error) {
	if len(data) == 0 {
		return nil, errors.New("jcs: empty input")
	}
	if err := checkDepth(data); err != nil {
		return nil, err
	}
	out, err := jcs.Transform(data)
	if err != nil {
		return nil, fmt.Errorf("jcs: invalid JSON: %v", err)
	}
	return out, nil
}

// Marshal returns the canonical JSON encoding of v: encoding/json's
// encoding, canonicalized.
func Marshal(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("jcs: %w", err)
	}
	return Canonicalize(data)
}

// checkDepth fails when data nests arrays or objects deeper than MaxDepth.
// It only tracks brackets outside strings; everything else about the text
// is judged by the full parser afterwards, so on malformed input it may
// pass what the parser then rejects, but it never rejects a well-formed
// text of allowed depth.
func checkDepth(data []byte) error {
	depth := 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			if depth > MaxDepth {
				return ErrTooDeep
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}
