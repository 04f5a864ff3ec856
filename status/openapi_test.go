package status_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/usherhq/usher/status"
)

// The OpenAPI document's schemas of GET /api/admin/status have exactly
// the members the report's types encode, required unless left out when
// empty.
func TestOpenAPISchemasMatchReport(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../assistant/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string
				Properties map[string]json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{
		"AdminStatus":       status.Report{},
		"ReplicaStatus":     status.ReplicaStatus{},
		"UpstreamStatus":    status.Upstream{},
		"UpstreamOnReplica": status.UpstreamOnReplica{},
		"QueueStatus":       status.Queue{},
		"ApprovalsStatus":   status.Approvals{},
		"OldestApproval":    status.PendingApproval{},
		"CheckpointStatus":  status.Checkpoint{},
		"AdminUsage":        status.Usage{},
		"UsageRow":          status.UsageRow{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("openapi.json has no schema %s", name)
			continue
		}
		typ := reflect.TypeOf(v)
		var fields, required []string
		for i := range typ.NumField() {
			tag, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			fields = append(fields, tag)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, tag)
			}
		}
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		for _, l := range [][]string{fields, required, props, s.Required} {
			sort.Strings(l)
		}
		if !slices.Equal(props, fields) {
			t.Errorf("schema %s has properties %v; %s encodes %v", name, props, typ, fields)
		}
		if !slices.Equal(s.Required, required) {
			t.Errorf("schema %s requires %v; %s always encodes %v", name, s.Required, typ, required)
		}
	}
}
