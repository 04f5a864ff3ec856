package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"

	"github.com/usherhq/usher/internal/jcs"
)

// Limits on the arguments a policy evaluates. A call beyond them is denied:
// real tool arguments stay far below them, and hostile ones must not cost
// more than they are worth.
const (
	maxArgumentBytes  = 1 << 20 // bytes of JSON text
	maxArgumentDepth  = 32      // nesting of objects and arrays
	maxArgumentValues = 10000   // values in total
)

// cedarArguments converts a call's JSON arguments into the Cedar record
// context.arguments. The arguments are first put in RFC 8785 canonical
// form — the form approvals are bound to — so that two texts with the same
// canonical form are decided alike, and so that duplicate member names,
// invalid UTF-8 and lone surrogates (which tools may read differently from
// the policy) are refused. So are two names of one object that are equal
// under Unicode case folding ("sql" and "ſql"): a tool that matches names
// case-insensitively could read the one the policy did not.
//
// JSON maps to Cedar as follows: an object is a record; an array is a set
// (order and duplicates are lost); a string is a String; true and false are
// Booleans; an integer within int64 is a Long; any other number is a
// decimal when its canonical form has at most four fractional digits and
// fits Cedar's decimal range, and otherwise a String holding its canonical
// form; null is left out (the member is absent, the element skipped).
func cedarArguments(raw json.RawMessage) (cedar.Record, error) {
	if len(raw) > maxArgumentBytes {
		return cedar.Record{}, fmt.Errorf("they are larger than %d bytes", maxArgumentBytes)
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return cedar.NewRecord(nil), nil
	}
	canonical, err := jcs.Canonicalize(raw)
	switch {
	case errors.Is(err, jcs.ErrTooDeep):
		return cedar.Record{}, fmt.Errorf("they are nested deeper than %d levels", maxArgumentDepth)
	case err != nil:
		return cedar.Record{}, errors.New("they are not I-JSON (RFC 7493): invalid JSON or UTF-8, a lone surrogate, or a duplicate member name")
	}
	if first, second, found, _ := jcs.FoldCollision(canonical); found {
		return cedar.Record{}, fmt.Errorf("the names %+.64q and %+.64q differ only in letter case, and a tool could read either", first, second)
	}
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return cedar.Record{}, errors.New("they are not a JSON object")
	}
	c := converter{left: maxArgumentValues}
	return c.record(v, 1)
}

// converter turns decoded JSON into Cedar values within the limits.
type converter struct {
	left int // values still allowed
}

func (c *converter) record(m map[string]any, depth int) (cedar.Record, error) {
	if err := c.enter(depth); err != nil {
		return cedar.Record{}, err
	}
	rm := make(cedar.RecordMap, len(m))
	for k, v := range m {
		cv, err := c.value(v, depth)
		if err != nil {
			return cedar.Record{}, err
		}
		if cv != nil {
			rm[cedar.String(k)] = cv
		}
	}
	return cedar.NewRecord(rm), nil
}

// value converts v, found at depth, returning nil for null.
func (c *converter) value(v any, depth int) (cedar.Value, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case bool:
		return cedar.Boolean(v), c.enter(depth)
	case string:
		return cedar.String(v), c.enter(depth)
	case json.Number:
		return number(string(v)), c.enter(depth)
	case map[string]any:
		return c.record(v, depth+1)
	case []any:
		if err := c.enter(depth + 1); err != nil {
			return nil, err
		}
		vs := make([]cedar.Value, 0, len(v))
		for _, e := range v {
			cv, err := c.value(e, depth+1)
			if err != nil {
				return nil, err
			}
			if cv != nil {
				vs = append(vs, cv)
			}
		}
		return cedar.NewSet(vs...), nil
	}
	return nil, fmt.Errorf("they hold an unexpected %T", v)
}

// enter counts one value at depth against the limits.
func (c *converter) enter(depth int) error {
	if depth > maxArgumentDepth {
		return fmt.Errorf("they are nested deeper than %d levels", maxArgumentDepth)
	}
	c.left--
	if c.left < 0 {
		return fmt.Errorf("they hold more than %d values", maxArgumentValues)
	}
	return nil
}

// number converts a number in canonical form (see cedarArguments).
func number(s string) cedar.Value {
	if !strings.ContainsAny(s, ".e") {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return cedar.Long(n)
		}
		return cedar.String(s)
	}
	if d, err := types.ParseDecimal(s); err == nil {
		return d
	}
	return cedar.String(s)
}
