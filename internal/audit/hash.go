package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/usherhq/usher/store"
)

// timeLayout is how the body writes a record's time: RFC 3339 in UTC with
// exactly six fractional digits.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// body is a record as it is hashed. Its fields are in the byte order of
// their JSON names, so that encoding/json writes the keys sorted; see the
// package documentation.
type body struct {
	ApprovalID     string          `json:"approval_id"`
	ArgumentsHash  string          `json:"arguments_hash"`
	At             string          `json:"at"`
	ClientID       string          `json:"client_id"`
	Decision       string          `json:"decision"`
	DefinitionHash string          `json:"definition_hash"`
	Details        json.RawMessage `json:"details"`
	EventID        string          `json:"event_id,omitempty"`
	Kind           string          `json:"kind"`
	LatencyUS      int64           `json:"latency_us"`
	Outcome        string          `json:"outcome"`
	PolicyHash     string          `json:"policy_hash"`
	PolicyIDs      []string        `json:"policy_ids"`
	Principal      string          `json:"principal"`
	RunID          string          `json:"run_id"`
	Seq            int64           `json:"seq"`
	TokenJTI       string          `json:"token_jti"`
	Tool           string          `json:"tool"`
}

// Hash returns the hash of r as the package documentation defines it: over
// r.PrevHash and every field of r but Hash. It fails only when r.Details
// is not JSON.
func Hash(r store.AuditRecord) (string, error) {
	b, err := bodyOf(r)
	if err != nil {
		return "", err
	}
	return hashBody(r.PrevHash, b)
}

// hashBody is Hash of the record whose body is b.
func hashBody(prevHash string, b body) (string, error) {
	enc, err := marshal(b)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(prevHash))
	h.Write(enc)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// seqMark is how a body's encoding writes a Seq of 0, and what follows it:
// token_jti, the next field (never omitted), and after it only strings,
// in which a quote is escaped, so its last occurrence is the field's.
var seqMark = []byte(`,"seq":0,"token_jti":`)

// linkOf returns the encoding of b around its Seq (see store.AuditLink):
// the body of any Seq is link.Before, the Seq in decimal, link.After.
func linkOf(b body) (*store.AuditLink, error) {
	b.Seq = 0
	enc, err := marshal(b)
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndex(enc, seqMark)
	if i < 0 {
		return nil, errors.New("audit: the body's encoding has no seq")
	}
	at := i + len(`,"seq":`)
	return &store.AuditLink{Before: enc[:at:at], After: enc[at+1:]}, nil
}

// linkedHash is the hash of the record of seq and prevHash whose body is
// link's: the same as hashBody's of that body.
func linkedHash(prevHash string, link *store.AuditLink, seq int64) string {
	var digits [20]byte
	h := sha256.New()
	h.Write([]byte(prevHash))
	h.Write(link.Before)
	h.Write(strconv.AppendInt(digits[:0], seq, 10))
	h.Write(link.After)
	return hex.EncodeToString(h.Sum(nil))
}

// bodyOf returns the hashed form of r.
func bodyOf(r store.AuditRecord) (body, error) {
	details, err := canonicalDetails(r.Details)
	if err != nil {
		return body{}, err
	}
	return canonicalBodyOf(r, details), nil
}

// canonicalBodyOf is bodyOf of r whose details are already canonical
// (canonicalDetails), as a Builder's are: canonicalising them again would
// give the same bytes.
func canonicalBodyOf(r store.AuditRecord, details json.RawMessage) body {
	policyIDs := r.PolicyIDs
	if policyIDs == nil {
		policyIDs = []string{}
	}
	return body{
		ApprovalID:     r.ApprovalID,
		ArgumentsHash:  r.ArgumentsHash,
		At:             r.At.UTC().Format(timeLayout),
		ClientID:       r.ClientID,
		Decision:       r.Decision,
		DefinitionHash: r.DefinitionHash,
		Details:        details,
		EventID:        r.EventID,
		Kind:           r.Kind,
		LatencyUS:      r.Latency.Microseconds(),
		Outcome:        r.Outcome,
		PolicyHash:     r.PolicyHash,
		PolicyIDs:      policyIDs,
		Principal:      r.Principal,
		RunID:          r.RunID,
		Seq:            r.Seq,
		TokenJTI:       r.TokenJTI,
		Tool:           r.Tool,
	}
}

// canonicalDetails returns details with object keys sorted, no whitespace
// and numbers as written; {} for none. Details already in that form (see
// isCanonicalJSON), as the MCP server's are, are returned as they are,
// not parsed and written again.
func canonicalDetails(details json.RawMessage) (json.RawMessage, error) {
	if len(details) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if isCanonicalJSON(details) {
		return details, nil
	}
	if !json.Valid(details) {
		return nil, errors.New("audit: details are not one JSON value")
	}
	dec := json.NewDecoder(bytes.NewReader(details))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("audit: details: %w", err)
	}
	return marshal(v)
}

// marshal encodes v as compact JSON without HTML escaping; maps are
// written with sorted keys.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("audit: encode: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// storedLatency is d as the log keeps it: whole microseconds.
func storedLatency(d time.Duration) time.Duration {
	return d.Truncate(time.Microsecond)
}
