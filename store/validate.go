package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The checks every engine runs before it writes, so both refuse the same
// values with the same ErrInvalid.

// checkNewRun validates the fields CreateRun takes from the caller.
func checkNewRun(r Run) error {
	var errs []error
	if r.ID == "" {
		errs = append(errs, errors.New("run ID is empty"))
	}
	if r.Owner == "" {
		errs = append(errs, errors.New("run owner is empty"))
	}
	if !r.Status.Valid() {
		errs = append(errs, fmt.Errorf("run status %q is unknown", r.Status))
	}
	errs = append(errs, checkTime("run QueuedAt", r.QueuedAt), checkMetadata(r.Metadata))
	if r.ParentVersion < 0 || (r.ParentVersion > 0 && r.ParentRunID == "") {
		errs = append(errs, fmt.Errorf("run parent version %d names no parent run", r.ParentVersion))
	}
	return invalid(errs...)
}

// metadataOf is the metadata column's value of r: its metadata, or {}.
func metadataOf(r Run) string {
	if r.Metadata == "" {
		return "{}"
	}
	return r.Metadata
}

// checkMetadata validates a run's metadata: none, or a JSON object of at
// most MaxRunMetadata bytes.
func checkMetadata(m string) error {
	if m == "" {
		return nil
	}
	if len(m) > MaxRunMetadata {
		return fmt.Errorf("run metadata is %d bytes, over %d", len(m), MaxRunMetadata)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(m), &obj); err != nil || obj == nil {
		return errors.New("run metadata is not a JSON object")
	}
	return nil
}

// checkTransition validates a compare-and-swap of a run's status.
func checkTransition(from, to RunStatus) error {
	var errs []error
	if !from.Valid() {
		errs = append(errs, fmt.Errorf("run status %q is unknown", from))
	} else if from.Terminal() {
		errs = append(errs, fmt.Errorf("run status %s is terminal", from))
	}
	if !to.Valid() {
		errs = append(errs, fmt.Errorf("run status %q is unknown", to))
	}
	return invalid(errs...)
}

// eventPayload returns the bytes to store for an event payload: {} for none,
// a private copy of anything else that is valid JSON.
func eventPayload(typ string, payload json.RawMessage) (json.RawMessage, error) {
	if typ == "" {
		return nil, invalid(errors.New("event type is empty"))
	}
	if len(payload) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if !json.Valid(payload) {
		return nil, invalid(fmt.Errorf("payload of %s event is not valid JSON", typ))
	}
	if !jsonbStorable(payload) {
		return nil, invalid(fmt.Errorf("payload of %s event holds \\u0000 or an unpaired surrogate, which PostgreSQL cannot store", typ))
	}
	return bytes.Clone(payload), nil
}

// jsonbStorable reports whether PostgreSQL's jsonb can hold the valid JSON
// text p: it refuses the escape \u0000 and surrogate escapes that do not
// form a pair. Every engine refuses such payloads, so that they agree.
func jsonbStorable(p []byte) bool {
	for i := 0; i < len(p); i++ {
		// p is valid JSON, so a backslash always starts an escape in a
		// string, and \u is always followed by four hex digits.
		if p[i] != '\\' {
			continue
		}
		i++
		if p[i] != 'u' {
			continue
		}
		r := hex4(p[i+1:])
		i += 4
		switch {
		case r == 0, r >= 0xDC00 && r <= 0xDFFF:
			return false
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(p) || p[i+1] != '\\' || p[i+2] != 'u' {
				return false
			}
			if low := hex4(p[i+3:]); low < 0xDC00 || low > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

// hex4 decodes the four hex digits at the start of p.
func hex4(p []byte) rune {
	var r rune
	for _, c := range p[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// checkListLimit validates the page size of a listing.
func checkListLimit(limit int) error {
	if limit < 1 {
		return invalid(fmt.Errorf("limit is %d, want 1 or more", limit))
	}
	return nil
}

// checkSigningKey validates a key before it is stored.
func checkSigningKey(k SigningKey) error {
	var errs []error
	if k.ID == "" {
		errs = append(errs, errors.New("signing key ID is empty"))
	}
	if k.Purpose == "" {
		errs = append(errs, errors.New("signing key purpose is empty"))
	}
	if k.Generation < 1 {
		errs = append(errs, fmt.Errorf("signing key generation is %d, want 1 or more", k.Generation))
	}
	if k.Algorithm == "" {
		errs = append(errs, errors.New("signing key algorithm is empty"))
	}
	if len(k.PublicKey) == 0 {
		errs = append(errs, errors.New("signing key has no public key"))
	}
	if len(k.PrivateKey) == 0 {
		errs = append(errs, errors.New("signing key has no private key"))
	}
	if k.SignsFrom.IsZero() {
		errs = append(errs, errors.New("signing key SignsFrom is zero"))
	}
	if k.PublishedUntil.IsZero() {
		errs = append(errs, errors.New("signing key PublishedUntil is zero"))
	}
	errs = append(errs,
		checkTime("signing key CreatedAt", k.CreatedAt),
		checkTime("signing key SignsFrom", k.SignsFrom),
		checkTime("signing key PublishedUntil", k.PublishedUntil),
	)
	return invalid(errs...)
}

// checkTime refuses times outside the years 1 to 9999, which SQLite's
// fixed-width text form cannot order.
func checkTime(name string, t time.Time) error {
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return fmt.Errorf("%s is in year %d, want 1 to 9999", name, y)
	}
	return nil
}

// invalid wraps the non-nil errs in ErrInvalid, or returns nil for none.
func invalid(errs ...error) error {
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// checkText refuses text that not every engine can store: PostgreSQL's
// text holds neither NUL nor invalid UTF-8, so neither engine takes it.
func checkText(name, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", name)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s holds a NUL character", name)
	}
	return nil
}

// checkTraceContext validates a trace context's bounds and characters.
func checkTraceContext(tc TraceContext) error {
	var errs []error
	for _, part := range []struct {
		name, v string
		max     int
	}{{"traceparent", tc.Parent, MaxTraceParent}, {"tracestate", tc.State, MaxTraceState}} {
		switch {
		case len(part.v) > part.max:
			errs = append(errs, fmt.Errorf("%s is %d bytes, more than %d", part.name, len(part.v), part.max))
		case strings.ContainsFunc(part.v, func(r rune) bool { return r < 0x20 || r > 0x7e }):
			errs = append(errs, fmt.Errorf("%s holds a character that is not printable ASCII", part.name))
		}
	}
	if tc.Parent == "" && tc.State != "" {
		errs = append(errs, errors.New("tracestate without a traceparent"))
	}
	return errors.Join(errs...)
}

// checkNames validates a list of names stored as a JSON array, such as
// policy ids or approver groups: each is set and storable as text.
func checkNames(what string, names []string) error {
	var errs []error
	for i, n := range names {
		if n == "" {
			errs = append(errs, fmt.Errorf("%s #%d is empty", what, i+1))
		}
		if checkText(what, n) != nil {
			// Named only when it fails: names are checked on every write.
			errs = append(errs, checkText(fmt.Sprintf("%s #%d", what, i+1), n))
		}
	}
	return errors.Join(errs...)
}

// checkJSON validates a JSON column's value: empty (the column's default),
// or one valid JSON value in UTF-8.
func checkJSON(name string, v json.RawMessage) error {
	if len(v) == 0 {
		return nil
	}
	if !json.Valid(v) || !utf8.Valid(v) {
		return fmt.Errorf("%s is not valid JSON", name)
	}
	return nil
}

// checkNow validates the time a state change happens at.
func checkNow(now time.Time) error {
	if now.IsZero() {
		return errors.New("the time of the change is zero")
	}
	return checkTime("the time of the change", now)
}
