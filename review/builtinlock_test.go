package review_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/review"
	"github.com/usherhq/usher/store/storetest"
)

// A built-in tool changed since the lock written at first start
// (Catalog.BuiltinLock, read back from its file) shows the reviewer the
// definition reviewed beside the current one, as an upstream tool locked
// by `usher tools lock` does.
func TestBuiltinChangedSinceTheFirstLock(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	cat := newCatalog(t, st)
	first := cat.BuiltinLock()
	// The lock as an earlier release wrote it: notes_list described
	// otherwise.
	older := first.Definitions["notes_list"]
	if older.Name != "notes_list" {
		t.Fatalf("the first lock keeps no definition of notes_list: %+v", first.Definitions)
	}
	older.Description = "Lists your notes, as reviewed."
	h, err := policy.DefinitionHash(older)
	if err != nil {
		t.Fatal(err)
	}
	first.Tools["notes_list"], first.Definitions["notes_list"] = h, older
	path := filepath.Join(t.TempDir(), "tools.lock")
	if err := first.Write(path); err != nil {
		t.Fatal(err)
	}
	lock, err := policy.ReadLock(path)
	if err != nil {
		t.Fatal(err)
	}

	e := newEnv(t, st, &review.Options{Groups: []string{"security"}, Logger: quiet, Policy: policy.Default(), Lock: lock, Catalog: cat})
	var got struct {
		Offers []tool `json:"offers"`
	}
	getJSON(t, e.a, e.a.token(t, "rita", "security"), "/api/tools", &got)
	seen := false
	for _, o := range got.Offers {
		switch {
		case o.Kind != "tool":
		case o.Name == "notes_list":
			seen = true
			if o.LockState != "changed" || o.LockedHash != h || !strings.Contains(string(o.LockedDefinition), "as reviewed") ||
				strings.Contains(string(o.Definition), "as reviewed") {
				t.Errorf("notes_list = %+v, want changed with the reviewed definition beside the current one", o)
			}
		case o.LockState != "locked" || o.LockedDefinition != nil:
			t.Errorf("%s = %+v, want locked, no definition shown", o.Name, o)
		}
	}
	if !seen {
		t.Error("notes_list is not offered")
	}
}
