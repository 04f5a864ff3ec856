package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	cedar "github.com/cedar-policy/cedar-go"
)

// The annotations a policy statement may carry. Any other annotation is a
// validation error, so that a misspelt @approvers cannot silently widen who
// may approve.
const (
	annotationID        = "id"
	annotationOutcome   = "outcome"
	annotationApprovers = "approvers"
	annotationReason    = "reason"
)

// idPattern is what an @id may look like: ids end up in decisions, audit
// entries and terminal output, so they are kept to plain printable ASCII.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

// Policy is a parsed and validated policy file. It is immutable and safe
// for concurrent use.
type Policy struct {
	name string
	hash string
	src  []byte // the file as parsed, for Statements
	set  *cedar.PolicySet
	// listing holds the statements whose conditions do not read
	// context.arguments, which decide listings (see DecideListing).
	listing *cedar.PolicySet
	rules   []*rule // in file order
	byID    map[cedar.PolicyID]*rule
}

// rule is one policy statement with its annotations interpreted.
type rule struct {
	id        string
	forbid    bool
	outcome   Outcome  // Deny for a forbid, else Allow or Approve
	approvers []string // approve permits only; empty: the requesting user
	reason    string   // @reason, may be empty
	matched   string   // the reason a decision gives when it matches (see describe)
	position  string   // file:line:column
	cedar     *cedar.Policy
	// readsArguments is set when a condition may read
	// context.arguments (see readsArguments).
	readsArguments bool
}

// Load reads and parses the policy file at path, of at most MaxFileSize
// bytes.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // names the path
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	return Parse(path, src)
}

// Parse parses and validates the Cedar policy text src; name is used in
// positions and error messages. Every problem found is reported in one
// combined error: a Cedar syntax error, or, per statement, a missing,
// malformed or duplicate @id, an unknown annotation, an @outcome other than
// "allow" or "approve" on a permit (or other than "deny" on a forbid), and
// @approvers anywhere but on an approve permit or with an empty group name.
func Parse(name string, src []byte) (*Policy, error) {
	if err := checkShape(name, src); err != nil {
		return nil, err
	}
	if bytes.HasPrefix(src, byteOrderMark) {
		return nil, fmt.Errorf("%s:1:1: the file starts with a byte order mark (U+FEFF, an invisible character), which Cedar does not accept: save it as UTF-8 without one", name)
	}
	list, err := cedar.NewPolicyListFromBytes(name, src)
	if err != nil {
		return nil, syntaxError(name, src, err)
	}
	sum := sha256.Sum256(src)
	p := &Policy{
		name:    name,
		hash:    hex.EncodeToString(sum[:]),
		src:     slices.Clone(src),
		set:     cedar.NewPolicySet(),
		listing: cedar.NewPolicySet(),
		byID:    make(map[cedar.PolicyID]*rule, len(list)),
	}
	var errs []error
	for _, cp := range list {
		r, ruleErrs := newRule(cp)
		errs = append(errs, ruleErrs...)
		for _, m := range checkModel(cp) {
			errs = append(errs, fmt.Errorf("%s: %s", locate(name, src, cp.Position().Offset, m.token, r.position), m.message))
		}
		if r.id == "" {
			continue
		}
		if prev, dup := p.byID[cedar.PolicyID(r.id)]; dup {
			errs = append(errs, fmt.Errorf("%s: duplicate @id(%q), first used at %s", r.position, r.id, prev.position))
			continue
		}
		p.byID[cedar.PolicyID(r.id)] = r
		p.rules = append(p.rules, r)
		p.set.Add(cedar.PolicyID(r.id), cp)
		if !r.readsArguments {
			p.listing.Add(cedar.PolicyID(r.id), cp)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s is invalid:\n%w", name, errors.Join(errs...))
	}
	return p, nil
}

// newRule interprets the annotations of one statement. It returns the
// rule (with an empty id when the id is unusable) and every problem found.
func newRule(cp *cedar.Policy) (*rule, []error) {
	pos := cp.Position()
	r := &rule{
		forbid:   cp.Effect() == cedar.Forbid,
		position: fmt.Sprintf("%s:%d:%d", pos.Filename, pos.Line, pos.Column),
		cedar:    cp,
	}
	r.readsArguments = readsArguments(cp)
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{r.position}, args...)...))
	}
	ann := cp.Annotations()
	for _, key := range slices.Sorted(maps.Keys(ann)) {
		switch key {
		case annotationID, annotationOutcome, annotationApprovers, annotationReason:
		default:
			bad("unknown annotation @%s (allowed: @id, @outcome, @approvers, @reason)", key)
		}
	}

	id, hasID := ann[annotationID]
	switch {
	case !hasID:
		bad("policy has no @id annotation")
	case !idPattern.MatchString(string(id)):
		bad("@id(%q) must be 1-128 characters of A-Z a-z 0-9 . _ : / - starting with a letter or digit", id)
	default:
		r.id = string(id)
	}

	outcome, hasOutcome := ann[annotationOutcome]
	switch {
	case r.forbid:
		r.outcome = Deny
		if hasOutcome && outcome != "deny" {
			bad("a forbid always denies: @outcome(%q) is not allowed on it", outcome)
		}
	case !hasOutcome || outcome == "approve":
		r.outcome = Approve
	case outcome == "allow":
		r.outcome = Allow
	default:
		bad("unknown @outcome(%q) on a permit (allowed: \"allow\", \"approve\")", outcome)
	}

	if groups, ok := ann[annotationApprovers]; ok {
		if r.outcome != Approve {
			bad("@approvers is only allowed on a permit whose outcome is \"approve\"")
		}
		for g := range strings.SplitSeq(string(groups), ",") {
			g = strings.TrimSpace(g)
			if g == "" || !printable(g) {
				bad("@approvers(%q) names an empty or unprintable group", groups)
				break
			}
			r.approvers = append(r.approvers, g)
		}
	}
	r.reason = string(ann[annotationReason])
	if n := utf8.RuneCountInString(r.reason); n > maxReason {
		bad("@reason is %d characters long; at most %d are allowed", n, maxReason)
	}
	if c, ok := hiddenRune(r.reason); ok {
		bad("@reason holds U+%04X, an invisible or control character (a bidi control can make text read otherwise than it is): remove it", c)
	} else if !utf8.ValidString(r.reason) {
		bad("@reason is not valid UTF-8")
	}
	r.matched = describe(r)
	return r, errs
}

// maxReason is the most characters a @reason may have.
const maxReason = 500

// hiddenRune returns the first control or format character of s (a
// newline, a bidi control such as U+202E, a zero-width space), which
// could forge lines or make the text read otherwise in explanations and
// logs.
func hiddenRune(s string) (rune, bool) {
	for _, c := range s {
		if unicode.IsControl(c) || unicode.Is(unicode.Cf, c) {
			return c, true
		}
	}
	return 0, false
}

// printable reports whether s is valid UTF-8 without control characters,
// so that annotation text cannot forge lines in explanations or logs.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// Hash returns the hex SHA-256 of the policy file's bytes. Decisions and
// approvals carry it, so a changed policy file is visible in both.
func (p *Policy) Hash() string { return p.hash }

// Name returns the name the policy was parsed under (its path when loaded
// from a file).
func (p *Policy) Name() string { return p.name }
