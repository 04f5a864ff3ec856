package assistant

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// Search (GET /api/assistant/search?q=): the owner's runs whose title or
// messages hold every word of the query, each as the start of a word,
// case folded (store.SearchWords, store.SearchMessages).

// maxSearchResults is the most results a search answers.
const maxSearchResults = 50

// snippetRunes is about how many characters of a message a result shows.
const snippetRunes = 160

// SearchResult is one run a search found: by a message (Seq, the latest
// such message, and a snippet of it as plain text) or by its title (Seq
// 0, no snippet).
type SearchResult struct {
	Run     RunView `json:"run"`
	Seq     int64   `json:"seq,omitempty"`
	Snippet string  `json:"snippet,omitempty"`
}

var errNoSearchWords = httpx.Errorf(http.StatusBadRequest, "invalid_query", "Search for at least one word (letters or digits).")

// Search finds owner's runs whose title or messages hold every word of q,
// the most recently updated first, at most maxSearchResults.
func (rt *Runtime) Search(ctx context.Context, owner, q string) ([]SearchResult, error) {
	words := store.SearchWords(q)
	if len(words) == 0 {
		return nil, errNoSearchWords
	}
	matches, err := rt.st.SearchMessages(ctx, owner, q, store.MaxSearchResults)
	if errors.Is(err, store.ErrInvalid) {
		return nil, errNoSearchWords
	}
	if err != nil {
		return nil, err
	}
	byRun := make(map[string]store.MessageMatch, len(matches))
	for _, m := range matches {
		byRun[m.RunID] = m
	}
	runs, err := rt.st.ListRuns(ctx, owner)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(runs, func(a, b store.Run) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	out := []SearchResult{}
	for _, r := range runs {
		if len(out) == maxSearchResults {
			break
		}
		if m, ok := byRun[r.ID]; ok {
			out = append(out, SearchResult{Run: viewRun(r), Seq: m.Seq, Snippet: snippet(plainText(m.Content), words)})
		} else if holdsWords(r.Title, words) {
			out = append(out, SearchResult{Run: viewRun(r)})
		}
	}
	return out, nil
}

// holdsWords reports whether every one of words starts a word of text
// (store.Words).
func holdsWords(text string, words []string) bool {
	have := store.Words(text)
	for _, w := range words {
		if !slices.ContainsFunc(have, func(h string) bool { return strings.HasPrefix(h, w) }) {
			return false
		}
	}
	return true
}

// snippet is about snippetRunes characters of text around the first of
// words it holds (its start when none), marked "…" where cut.
func snippet(text string, words []string) string {
	lower := strings.ToLower(text)
	at := -1
	for _, w := range words {
		if i := strings.Index(lower, w); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	runes := []rune(text)
	if len(runes) <= snippetRunes {
		return text
	}
	start := 0
	if at > 0 {
		start = max(0, utf8.RuneCountInString(text[:min(at, len(text))])-snippetRunes/4)
	}
	end := min(len(runes), start+snippetRunes)
	out := strings.TrimSpace(string(runes[start:end]))
	if start > 0 {
		out = "…" + out
	}
	if end < len(runes) {
		out += "…"
	}
	return out
}

// handleSearch answers GET /api/assistant/search?q=.
func (rt *Runtime) handleSearch(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	q := r.URL.Query().Get("q")
	if len(q) > 1000 {
		rt.fail(w, r, httpx.Errorf(http.StatusBadRequest, "invalid_query", "The query is over 1000 bytes."))
		return
	}
	results, err := rt.Search(r.Context(), owner, q)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"results": results})
}
