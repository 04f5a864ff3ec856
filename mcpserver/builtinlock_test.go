package mcpserver

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/usherhq/usher/policy"
	"github.com/usherhq/usher/store/storetest"
)

// The lock written at first start keeps each built-in's definition beside
// its hash, as `usher tools lock` does, through Write and ReadLock; with a
// hash of the catalog's own that is not the lock's, it keeps the hashes
// only, and reads back.
func TestBuiltinLockKeepsDefinitions(t *testing.T) {
	t.Parallel()
	st := storetest.NewSQLite(t)
	for _, tc := range []struct {
		name string
		hash func(ToolDefinition) (string, error)
		kept bool
	}{
		{"the lock's hash", nil, true},
		{"another hash", func(d ToolDefinition) (string, error) {
			h, err := policy.DefinitionHash(policy.ToolDefinition(d))
			return h[:len(h)-1] + "0", err
		}, false},
	} {
		cat, err := NewCatalog(&CatalogOptions{DefinitionHash: tc.hash, Runs: st, Approvals: st, Notes: st, DemoTools: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cat.Close() })
		path := filepath.Join(t.TempDir(), "tools.lock")
		if err := cat.BuiltinLock().Write(path); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		lock, err := policy.ReadLock(path)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		defs, err := cat.Definitions(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(defs) < 2 || len(lock.Tools) != len(defs) {
			t.Fatalf("%s: the lock holds %d tools, the catalog %d built-ins", tc.name, len(lock.Tools), len(defs))
		}
		for _, d := range defs {
			kept, ok := lock.Definitions[d.Name]
			if lock.Tools[d.Name] != d.Hash || ok != tc.kept {
				t.Errorf("%s: %s locked as %s (definition kept: %v), want %s (kept: %v)", tc.name, d.Name, lock.Tools[d.Name], ok, d.Hash, tc.kept)
			}
			if !ok {
				continue
			}
			want, _ := json.Marshal(policy.ToolDefinition(d.ToolDefinition))
			got, _ := json.Marshal(kept)
			if h, _ := policy.DefinitionHash(kept); h != d.Hash || string(got) != string(want) {
				t.Errorf("%s: %s kept as %s (hash %s), want %s", tc.name, d.Name, got, h, want)
			}
		}
	}
}
