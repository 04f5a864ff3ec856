package mcpserver

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/usherhq/usher/policy"
)

// The kinds of Offer.
const (
	OfferTool     = "tool"
	OfferResource = "resource"
	OfferTemplate = "template"
	OfferPrompt   = "prompt"
)

// Offer is one tool, resource, resource template or prompt the catalog
// offers, as a reviewer compares it with the tool lock.
type Offer struct {
	// Kind is OfferTool, OfferResource, OfferTemplate or OfferPrompt.
	Kind string
	// Name is the exposed tool or prompt name, resource URI or URI
	// template.
	Name string
	// Server is the upstream's name, or policy.BuiltinServer for a
	// built-in tool.
	Server string
	// Hash is the definition hash: of a tool, policy.DefinitionHash of
	// Definition; of the others, of their listing as exposed.
	Hash string
	// Definition is what the hash covers, as JSON: a tool's
	// policy.ToolDefinition, or the resource, template or prompt as
	// resources/list, resources/templates/list or prompts/list shows it.
	Definition json.RawMessage
}

// Offered lists every tool, resource, resource template and prompt, after
// listing the upstreams afresh, ordered by kind (in that order) and name.
// With an error (naming the upstreams that could not be listed) the list
// lacks their offers or has old ones.
func (c *Catalog) Offered(ctx context.Context) ([]Offer, error) {
	c.refreshMu.Lock()
	snap := c.refreshLocked(ctx)
	c.refreshMu.Unlock()
	out := make([]Offer, 0, len(snap.tools)+len(snap.resources)+len(snap.templates)+len(snap.prompts))
	for _, t := range snap.tools {
		def, err := json.Marshal(policy.ToolDefinition(t.def))
		if err != nil {
			return nil, err
		}
		out = append(out, Offer{Kind: OfferTool, Name: t.def.Name, Server: cmp.Or(t.server, policy.BuiltinServer), Hash: t.hash, Definition: def})
	}
	for _, group := range []struct {
		kind string
		rs   []*resource
	}{{OfferResource, snap.resources}, {OfferTemplate, snap.templates}} {
		for _, r := range group.rs {
			var listed any = r.listed
			if r.listed == nil {
				listed = r.template
			}
			def, err := json.Marshal(listed)
			if err != nil {
				return nil, err
			}
			out = append(out, Offer{Kind: group.kind, Name: r.uri, Server: r.upstream.cfg.Name, Hash: r.hash, Definition: def})
		}
	}
	for _, p := range snap.prompts {
		def, err := json.Marshal(p.listed)
		if err != nil {
			return nil, err
		}
		out = append(out, Offer{Kind: OfferPrompt, Name: p.name, Server: p.upstream.cfg.Name, Hash: p.hash, Definition: def})
	}
	slices.SortStableFunc(out, func(a, b Offer) int {
		return cmp.Or(cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)), strings.Compare(a.Name, b.Name))
	})
	return out, snap.listErrors
}

// kindOrder is the place of an offer's kind in Offered.
func kindOrder(kind string) int {
	return slices.Index([]string{OfferTool, OfferResource, OfferTemplate, OfferPrompt}, kind)
}
