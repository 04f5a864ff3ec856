package status

import (
	"reflect"
	"testing"
	"time"

	"github.com/usherhq/usher/mcpserver"
)

// healthStates is a health check's states, as mcpserver.Health reports
// them.
type healthStates []mcpserver.UpstreamState

func (h healthStates) States() []mcpserver.UpstreamState { return h }

// Until a health check is in use, the configured upstreams are unknown;
// then each is what its latest listing says: unknown before the first,
// up, or down with the listing's error and the last time it was listed.
func TestCheckedUpstreams(t *testing.T) {
	c := &CheckedUpstreams{Configured: UnknownUpstreams{"github", "jira"}}
	want := []UpstreamState{{Name: "github", State: StateUnknown}, {Name: "jira", State: StateUnknown}}
	if got := c.UpstreamStates(); !reflect.DeepEqual(got, want) {
		t.Fatalf("before a check: %+v, want %+v", got, want)
	}
	listed := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	c.Use(healthStates{
		{Name: "github", Up: true, Checked: listed, Listed: listed},
		{Name: "jira", Up: false, Checked: listed.Add(time.Minute), Listed: listed, Error: "connection refused"},
		{Name: "new"},
	})
	want = []UpstreamState{
		{Name: "github", State: StateUp, LastOK: listed},
		{Name: "jira", State: StateDown, LastOK: listed, Error: "connection refused"},
		{Name: "new", State: StateUnknown},
	}
	if got := c.UpstreamStates(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after checks: %+v,\nwant %+v", got, want)
	}
}
