package jcs

import (
	"bytes"
	"errors"
	"io"
	"unicode"

	"github.com/go-json-experiment/json/jsontext"
)

// FoldCollision looks, in every object of the JSON text data at any depth
// (inside arrays too), for two member names that are equal under Unicode
// case folding (strings.EqualFold), such as "sql" and "ſql" (U+017F). It
// returns the first two it finds, in text order. Canonical JSON refuses
// only names that are identical; a tool decoding with encoding/json
// matches struct fields case-insensitively, last one wins, and so could
// read another member than the one a policy read. err is set for text
// that is not JSON.
func FoldCollision(data []byte) (first, second string, found bool, err error) {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	// seen holds, per open object, its names by folded form.
	var seen []map[string]string
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return "", "", false, nil
		}
		if err != nil {
			return "", "", false, err
		}
		switch tok.Kind() {
		case '{':
			seen = append(seen, map[string]string{})
		case '}':
			seen = seen[:len(seen)-1]
		case '"':
			kind, n := dec.StackIndex(dec.StackDepth())
			if kind != '{' || n%2 == 0 {
				continue // a value, not a name
			}
			name := tok.String()
			key := foldKey(name)
			names := seen[len(seen)-1]
			if prev, dup := names[key]; dup {
				return prev, name, true, nil
			}
			names[key] = name
		}
	}
}

// foldKey maps s to a string that is equal for two strings exactly when
// strings.EqualFold says they are: each rune is replaced by the smallest
// rune of its simple case-folding orbit.
func foldKey(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		out = append(out, least)
	}
	return string(out)
}
