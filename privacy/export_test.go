package privacy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/audit"
)

// TestExport: a person's export is one JSON object of their rows by
// table, nothing of anyone else's, recorded in the audit log before it is
// read (so a failed write is recorded too).
func TestExport(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, log := twoPeople(t, "todo", "ideas")
	var b bytes.Buffer
	counts, err := Export(ctx, st, log, "alice", "usher export", &b)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	var out struct {
		Principal string                      `json:"principal"`
		Tables    map[string][]map[string]any `json:"tables"`
	}
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatalf("the export is not one JSON object: %v\n%s", err, b.String())
	}
	if out.Principal != "alice" || len(out.Tables["notes"]) != 2 || len(out.Tables["runs"]) != 1 || len(out.Tables["run_events"]) != 1 {
		t.Errorf("the export = %+v", out)
	}
	if counts["notes"] != 2 || counts["runs"] != 1 {
		t.Errorf("counts = %v", counts)
	}
	if strings.Contains(b.String(), "bob") {
		t.Error("the export of alice names bob")
	}
	if e := out.Tables["run_events"][0]["payload"].(map[string]any); e["content"] != "hello from alice" {
		t.Errorf("the exported message = %v, want its JSON as JSON", e)
	}
	recs, err := st.AuditRecords(ctx, 0, 100)
	if err != nil || len(recs) != 1 || recs[0].Kind != string(audit.KindPrincipalExported) || recs[0].Principal != "alice" {
		t.Fatalf("audit records = %+v, %v; want the export's", recs, err)
	}

	// A destination that fails: the error, and the export still recorded.
	if _, err := Export(ctx, st, log, "alice", "usher export", failingWriter{}); !errors.Is(err, errWrite) {
		t.Errorf("Export to a failing writer = %v, want its error", err)
	}
	if recs, _ := st.AuditRecords(ctx, 0, 100); len(recs) != 2 {
		t.Errorf("%d audit records after the failed export, want 2", len(recs))
	}
}

var errWrite = errors.New("disk full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }
