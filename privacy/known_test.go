package privacy

import (
	"testing"

	"github.com/usherhq/usher/internal/audit"
)

// TestKnown: a person with a conversation is known, one only an audit
// record names is, one under a legal hold is, and an id nothing names
// is not; asking writes nothing.
func TestKnown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, log := twoPeople(t)
	if err := log.Append(ctx, audit.Entry{Kind: audit.KindAuthFailed, Principal: "carol"}); err != nil {
		t.Fatal(err)
	}
	if _, err := PlaceHold(ctx, st, log, "alice", "matter 7", "counsel"); err != nil {
		t.Fatal(err)
	}
	head, err := st.AuditHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for principal, want := range map[string]bool{"alice": true, "bob": true, "carol": true, "dave": false, "bob ": false} {
		if got, err := Known(ctx, st, principal); err != nil || got != want {
			t.Errorf("Known(%q) = %v, %v; want %v", principal, got, err, want)
		}
	}
	if after, err := st.AuditHead(ctx); err != nil || after != head {
		t.Errorf("the audit head after Known = %+v, %v; want %+v as before", after, err, head)
	}
}
