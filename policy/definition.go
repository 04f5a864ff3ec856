package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/jcs"
)

// ToolDefinition is what a tool's definition hash covers: the fields of an
// MCP tool (as tools/list returns it) that tell a model and a person what
// the tool does. Its JSON form uses the MCP field names.
type ToolDefinition struct {
	Name         string          `json:"name"` // as exposed, with any upstream prefix
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  json.RawMessage `json:"annotations,omitempty"`
}

// DefinitionHash returns "sha256:" and the hex SHA-256 of the RFC 8785
// canonical JSON of the object with the members name, title, description,
// inputSchema, outputSchema and annotations of d. An empty string member
// and a JSON member that is empty or null are left out. A changed title,
// description, schema or annotation changes the hash, and so makes the
// tool unreviewed; reordering a schema's members or its whitespace does
// not. docs/policy.md shows how to recompute it by hand.
func DefinitionHash(d ToolDefinition) (string, error) {
	canonical, err := canonicalDefinition(d)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// canonicalDefinition returns the bytes DefinitionHash hashes.
func canonicalDefinition(d ToolDefinition) ([]byte, error) {
	if d.Name == "" {
		return nil, errors.New("policy: tool definition has no name")
	}
	obj := map[string]any{}
	var errs []error
	for _, f := range []struct{ key, value string }{
		{"name", d.Name}, {"title", d.Title}, {"description", d.Description},
	} {
		switch {
		case !utf8.ValidString(f.value):
			// encoding/json would quietly replace the invalid bytes, and so
			// give two different texts one hash.
			errs = append(errs, fmt.Errorf("%s is not valid UTF-8", f.key))
		case f.value != "":
			obj[f.key] = f.value
		}
	}
	for _, f := range []struct {
		key   string
		value json.RawMessage
	}{
		{"inputSchema", d.InputSchema}, {"outputSchema", d.OutputSchema}, {"annotations", d.Annotations},
	} {
		if t := bytes.TrimSpace(f.value); len(t) == 0 || string(t) == "null" {
			continue
		}
		canonical, err := jcs.Canonicalize(f.value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.key, err))
			continue
		}
		obj[f.key] = json.RawMessage(canonical)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("policy: tool %+q definition: %w", d.Name, errors.Join(errs...))
	}
	return jcs.Marshal(obj)
}
