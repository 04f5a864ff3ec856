package store

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Message search: an owner's runs whose user or assistant messages hold
// every word of a query (each as the start of a word of the message, case
// folded). Each engine indexes the words its own way (migration 00014): a
// GIN index of to_tsvector('simple', content) on PostgreSQL, an FTS5 table
// on SQLite; both split words at whatever is not a letter or a digit.

// MessageMatch is a run's latest message that matches a search.
type MessageMatch struct {
	RunID   string
	Seq     int64
	Content string
}

// Bounds of a search query.
const (
	// MaxSearchWords is the most words a query may hold.
	MaxSearchWords = 8
	// maxSearchWord is the longest word, in bytes.
	maxSearchWord = 64
	// MaxSearchResults is the most runs a search returns.
	MaxSearchResults = 100
)

// Words are the words of text as a search matches them: runs of letters
// and digits, lowercased.
func Words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// SearchWords are the words of a query a search matches (Words): at most
// MaxSearchWords of them, each cut to 64 bytes (at a character's end).
func SearchWords(q string) []string {
	words := Words(q)
	if len(words) > MaxSearchWords {
		words = words[:MaxSearchWords]
	}
	for i, w := range words {
		for len(w) > maxSearchWord {
			_, size := utf8.DecodeLastRuneInString(w)
			w = w[:len(w)-size]
		}
		words[i] = w
	}
	return words
}

var searchMessages = perEngine(`
SELECT DISTINCT ON (e.run_id) e.run_id, e.seq, e.payload ->> 'content'
FROM run_events e
WHERE e.type IN ('message.user', 'message.assistant')
  AND to_tsvector('simple', e.payload ->> 'content') @@ to_tsquery('simple', $2)
  AND e.run_id IN (SELECT id FROM runs WHERE owner = $1 AND deleted_at IS NULL)
ORDER BY e.run_id, e.seq DESC
LIMIT $3`, `
SELECT run_id, max(seq), content FROM run_search
WHERE run_search MATCH $2
  AND run_id IN (SELECT id FROM runs WHERE owner = $1 AND deleted_at IS NULL)
GROUP BY run_id
LIMIT $3`)

// SearchMessages returns, for up to limit of owner's live runs whose user
// or assistant messages hold every word of query (SearchWords; each the
// start of a word of the message), the latest such message. ErrInvalid
// when the query holds no word or limit is out of range.
func (c *core) SearchMessages(ctx context.Context, owner, query string, limit int) ([]MessageMatch, error) {
	words := SearchWords(query)
	if len(words) == 0 || limit < 1 || limit > MaxSearchResults {
		return nil, invalid(fmt.Errorf("a search needs a word and a limit of 1 to %d, not %q and %d", MaxSearchResults, query, limit))
	}
	x := c.reader()
	terms := make([]string, len(words))
	for i, w := range words {
		if x.lite {
			terms[i] = `"` + w + `"*` // words hold no quote
		} else {
			terms[i] = w + ":*"
		}
	}
	sep := " & "
	if x.lite {
		sep = " "
	}
	out, err := queryAll(ctx, x, searchMessages, func(row rowScanner) (MessageMatch, error) {
		var m MessageMatch
		return m, row.Scan(&m.RunID, &m.Seq, &m.Content)
	}, owner, strings.Join(terms, sep), limit)
	if err != nil {
		return nil, c.fail(err)
	}
	return out, nil
}
