package review

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// DefaultLimit is how many records a page holds when the query names no
// limit; store.MaxAuditQueryLimit is the most it may name.
const DefaultLimit = 100

// maxCursorBytes bounds the cursor a client passes back.
const maxCursorBytes = 4096

// listParams are the parameters of GET /api/audit.
var listParams = []string{"kind", "principal", "tool", "server", "outcome", "since", "until",
	"after", "before", "limit", "order", "cursor"}

// errBadCursor answers a cursor that is not one this API made, or that a
// query with other filters made.
var errBadCursor = httpx.Errorf(http.StatusBadRequest, "invalid_cursor",
	"The cursor is not one this API returned as next for this query: pass next back unchanged, with the same filters or none.")

// unknownParameter answers a parameter the route does not take.
func unknownParameter(name string) error {
	return httpx.Errorf(http.StatusBadRequest, "unknown_parameter", fmt.Sprintf("The query parameter %q is not one this route takes.", name))
}

// badParameter answers a parameter whose value is not valid.
func badParameter(name, want string) error {
	return httpx.Errorf(http.StatusBadRequest, "invalid_parameter", fmt.Sprintf("The query parameter %q must be %s, at most once.", name, want))
}

// errBadQuery answers a query string that is not one.
var errBadQuery = httpx.Errorf(http.StatusBadRequest, "invalid_query", "The query string is not well-formed: each parameter is name=value, percent-encoded.")

// queryOf parses r's query strictly: a malformed pair is an error, where
// URL.Query drops it.
func queryOf(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errBadQuery
	}
	return q, nil
}

// firstKey is the first of q's keys, in byte order.
func firstKey(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[0]
}

// page is one query of GET /api/audit, as its cursor carries it: the
// filters and bounds as the client first sent them, and where the next
// page starts (Pos, 0 for the first page).
type page struct {
	Kind      string `json:"kind,omitempty"`
	Principal string `json:"principal,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Server    string `json:"server,omitempty"`
	Outcome   string `json:"outcome,omitempty"`
	Since     string `json:"since,omitempty"`
	Until     string `json:"until,omitempty"`
	After     int64  `json:"after,omitempty"`
	Before    int64  `json:"before,omitempty"`
	Desc      bool   `json:"desc,omitempty"`
	Limit     int    `json:"limit"`
	Pos       int64  `json:"pos,omitempty"`
}

// cursorOf is the opaque cursor of p: its JSON and a checksum of it,
// base64url. A cursor grants nothing (the reviewer's tenant is applied to
// every query, whatever the cursor says); the checksum only tells a
// cursor that was altered or cut from one that was made here.
func cursorOf(p page) string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(append(b, hex.EncodeToString(sum[:8])...))
}

// pageOfCursor is the page a cursor names, or errBadCursor.
func pageOfCursor(c string) (page, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(c) > maxCursorBytes || len(raw) < 16 {
		return page{}, errBadCursor
	}
	b, sum := raw[:len(raw)-16], raw[len(raw)-16:]
	want := sha256.Sum256(b)
	if hex.EncodeToString(want[:8]) != string(sum) {
		return page{}, errBadCursor
	}
	var p page
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || dec.More() {
		return page{}, errBadCursor
	}
	return p, nil
}

// parseList reads the page a GET /api/audit asks for. With a cursor, the
// other parameters may be left out; those given must be the cursor's.
func parseList(q url.Values) (page, error) {
	for k, v := range q {
		if !slices.Contains(listParams, k) {
			return page{}, unknownParameter(k)
		}
		if len(v) != 1 {
			return page{}, badParameter(k, "given once")
		}
	}
	p := page{
		Kind: q.Get("kind"), Principal: q.Get("principal"), Tool: q.Get("tool"), Server: q.Get("server"),
		Outcome: q.Get("outcome"), Since: q.Get("since"), Until: q.Get("until"), Limit: DefaultLimit,
	}
	if name := badText(p); name != "" {
		return page{}, badParameter(name, "UTF-8 text without NUL")
	}
	for _, t := range []struct{ name, value string }{{"since", p.Since}, {"until", p.Until}} {
		if _, err := parseTime(t.value); err != nil {
			return page{}, badParameter(t.name, "a time in RFC 3339 form (2031-05-06T07:00:00Z)")
		}
	}
	var err error
	if p.After, err = seqParam(q, "after"); err != nil {
		return page{}, err
	}
	if p.Before, err = seqParam(q, "before"); err != nil {
		return page{}, err
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > store.MaxAuditQueryLimit || s[0] == '+' {
			return page{}, badParameter("limit", fmt.Sprintf("an integer from 1 to %d", store.MaxAuditQueryLimit))
		}
		p.Limit = n
	}
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		p.Desc = true
	default:
		return page{}, badParameter("order", `"asc" or "desc"`)
	}
	c := q.Get("cursor")
	if c == "" {
		return p, nil
	}
	cp, err := pageOfCursor(c)
	if err != nil {
		return page{}, err
	}
	// Each parameter given with the cursor must be the cursor's; the
	// limit alone may change from page to page.
	given := p
	given.Pos, given.Limit = cp.Pos, cp.Limit
	cmp := cp
	for _, k := range listParams {
		if k != "cursor" && k != "limit" && !q.Has(k) {
			clearParam(&cmp, k)
			clearParam(&given, k)
		}
	}
	if given != cmp {
		return page{}, errBadCursor
	}
	if q.Has("limit") {
		cp.Limit = p.Limit
	}
	if _, err := parseTime(cp.Since); err != nil {
		return page{}, errBadCursor
	}
	if _, err := parseTime(cp.Until); err != nil {
		return page{}, errBadCursor
	}
	if cp.Limit < 1 || cp.Limit > store.MaxAuditQueryLimit || cp.After < 0 || cp.Before < 0 || cp.Pos < 0 || badText(cp) != "" {
		return page{}, errBadCursor
	}
	return cp, nil
}

// badText names the first text filter of p that is not UTF-8 text
// without NUL, which no record holds; "" when none.
func badText(p page) string {
	for _, f := range [...]struct{ name, value string }{
		{"kind", p.Kind}, {"principal", p.Principal}, {"tool", p.Tool}, {"server", p.Server}, {"outcome", p.Outcome},
	} {
		if !utf8.ValidString(f.value) || strings.ContainsRune(f.value, 0) {
			return f.name
		}
	}
	return ""
}

// clearParam zeroes the field of p that parameter k sets.
func clearParam(p *page, k string) {
	switch k {
	case "kind":
		p.Kind = ""
	case "principal":
		p.Principal = ""
	case "tool":
		p.Tool = ""
	case "server":
		p.Server = ""
	case "outcome":
		p.Outcome = ""
	case "since":
		p.Since = ""
	case "until":
		p.Until = ""
	case "after":
		p.After = 0
	case "before":
		p.Before = 0
	case "order":
		p.Desc = false
	}
}

// afterOnly reads the query of a route whose one parameter is after, a
// sequence number (0 when absent).
func afterOnly(r *http.Request) (int64, error) {
	q, err := onlyParams(r, "after")
	if err != nil {
		return 0, err
	}
	return seqParam(q, "after")
}

// onlyParams is r's query, each parameter among names and given once.
func onlyParams(r *http.Request, names ...string) (url.Values, error) {
	q, err := queryOf(r)
	if err != nil {
		return nil, err
	}
	for k, v := range q {
		if !slices.Contains(names, k) {
			return nil, unknownParameter(k)
		}
		if len(v) != 1 {
			return nil, badParameter(k, "given once")
		}
	}
	return q, nil
}

// seqParam reads the sequence number parameter name: 0 when absent.
func seqParam(q url.Values, name string) (int64, error) {
	s := q.Get(name)
	if s == "" && !q.Has(name) {
		return 0, nil
	}
	n, err := parseSeq(s)
	if err != nil {
		return 0, badParameter(name, "a sequence number (0 or more)")
	}
	return n, nil
}

// parseTime parses an RFC 3339 time; "" is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1 || t.Year() > 9999 {
		return time.Time{}, fmt.Errorf("bad time %q", s)
	}
	return t, nil
}

// query is the store's query of p for the reviewer's tenant scope.
func (p page) query(scope string) store.AuditQuery {
	since, _ := parseTime(p.Since)
	until, _ := parseTime(p.Until)
	q := store.AuditQuery{
		Scope: scope, Kind: p.Kind, Principal: p.Principal, Tool: p.Tool, Server: p.Server, Outcome: p.Outcome,
		Since: since, Until: until, After: p.After, Before: p.Before, Descending: p.Desc, Limit: p.Limit,
	}
	if p.Pos > 0 {
		if p.Desc && (q.Before == 0 || p.Pos < q.Before) {
			q.Before = p.Pos
		} else if !p.Desc && p.Pos > q.After {
			q.After = p.Pos
		}
	}
	return q
}

// list answers GET /api/audit: {"records": [...], "next": "..."}, each
// record as audit.Line writes it; next is absent after the last page (a
// full page may be followed by an empty one).
func (a *API) list(w http.ResponseWriter, r *http.Request) {
	q, err := queryOf(r)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	p, err := parseList(q)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	// Each record is written as it arrives, while the next ones are on
	// their way from the database.
	bp := listBodies.Get().(*[]byte)
	b := slices.Grow((*bp)[:0], listBodySize(p.Limit))
	b = append(b, `{"records":[`...)
	n, last := 0, int64(0)
	err = a.st.EachAudit(r.Context(), p.query(scope(r)), func(rec store.AuditRecord) error {
		if n > 0 {
			b = append(b, ',')
		}
		n, last = n+1, rec.Seq
		var err error
		b, err = audit.AppendRecord(b, rec)
		return err
	})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	b = append(b, ']')
	if n == p.Limit {
		p.Pos = last
		b = append(b, `,"next":"`...)
		b = append(b, cursorOf(p)...)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	writeJSONBytes(w, b)
	if cap(b) <= maxPooledBody {
		*bp = b[:0]
		listBodies.Put(bp)
	}
}

// listBodySize is the buffer a page of limit records starts with: a
// record's line is some 600 bytes. A page of more than 100 grows it, and
// a buffer so grown is kept in listBodies up to maxPooledBody.
func listBodySize(limit int) int { return 1024 + 640*min(limit, 100) }

// listBodies are buffers of answers that were written, kept for the next:
// a page of 100 records is some 60 kB.
var listBodies = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody is the largest buffer kept in listBodies.
const maxPooledBody = 1 << 20

// exportPage is how many records export reads from the store at a time.
const exportPage = 1000

// export answers GET /api/audit/export?after=N: the reviewer's tenant's
// records after N as JSON lines, read a page at a time.
func (a *API) export(w http.ResponseWriter, r *http.Request) {
	after, err := afterOnly(r)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	sc := scope(r)
	rs, err := a.st.QueryAudit(r.Context(), store.AuditQuery{Scope: sc, After: after, Limit: exportPage})
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for {
		for _, rec := range rs {
			line, err := audit.Line(rec)
			if err == nil {
				_, err = w.Write(line)
			}
			if err != nil {
				// The status is sent: a cut stream is all the client can
				// be told.
				a.log.WarnContext(r.Context(), "audit export ended early", "seq", rec.Seq, "err", err)
				return
			}
			after = rec.Seq
		}
		if len(rs) < exportPage {
			return
		}
		_ = rc.Flush()
		rs, err = a.st.QueryAudit(r.Context(), store.AuditQuery{Scope: sc, After: after, Limit: exportPage})
		if err != nil {
			a.log.WarnContext(r.Context(), "audit export ended early", "after", after, "err", err)
			return
		}
	}
}
