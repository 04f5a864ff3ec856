package policy

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var (
	hashA = "sha256:" + strings.Repeat("a", 64)
	hashB = "sha256:" + strings.Repeat("b", 64)
	hashC = "sha256:" + strings.Repeat("c", 64)
)

func TestLockRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tools.lock")
	lock := &Lock{Tools: map[string]string{"notes_list": hashB, "github__create_issue": hashA, "sessions_list": hashC}}
	if err := lock.Write(path); err != nil {
		t.Fatal(err)
	}
	want := `{
  "version": 1,
  "tools": {
    "github__create_issue": "` + hashA + `",
    "notes_list": "` + hashB + `",
    "sessions_list": "` + hashC + `"
  }
}
`
	if got := string(readFile(t, path)); got != want {
		t.Errorf("file:\n%s\nwant:\n%s", got, want)
	}
	back, err := ReadLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, lock) {
		t.Errorf("read back %v, want %v", back, lock)
	}
	// Overwriting replaces the file and leaves no temporary file behind.
	if err := (&Lock{Tools: map[string]string{"x": hashA}}).Write(path); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %v", entries)
	}
	if back, err := ReadLock(path); err != nil || len(back.Tools) != 1 {
		t.Errorf("after overwrite: %v, %v", back, err)
	}
}

func TestLockWriteRefusesInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tools.lock")
	for name, l := range map[string]*Lock{
		"empty name":   {Tools: map[string]string{"": hashA}},
		"bad hash":     {Tools: map[string]string{"x": "sha256:abc"}},
		"missing hash": {Tools: map[string]string{"x": ""}},
	} {
		if err := l.Write(path); err == nil {
			t.Errorf("%s: written", name)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused lock left %s behind", path)
	}
}

func TestParseLockErrors(t *testing.T) {
	tests := []struct {
		name string
		data string
	}{
		{"not JSON", `version: 1`},
		{"empty", ``},
		{"no version", `{"tools":{}}`},
		{"future version", `{"version":2,"tools":{}}`},
		{"unknown member", `{"version":1,"tools":{},"reviewed_by":"bob"}`},
		{"duplicate tool", `{"version":1,"tools":{"x":"` + hashA + `","x":"` + hashB + `"}}`},
		{"malformed hash", `{"version":1,"tools":{"x":"sha256:XYZ"}}`},
		{"upper-case hash", `{"version":1,"tools":{"x":"sha256:` + strings.Repeat("A", 64) + `"}}`},
		{"hash without prefix", `{"version":1,"tools":{"x":"` + strings.Repeat("a", 64) + `"}}`},
		{"empty tool name", `{"version":1,"tools":{"":"` + hashA + `"}}`},
		{"tools not an object", `{"version":1,"tools":[]}`},
		{"two documents", `{"version":1,"tools":{}} {}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if l, err := parseLock([]byte(tt.data)); err == nil {
				t.Errorf("parsed as %v", l)
			}
		})
	}
	if l, err := parseLock([]byte(`{"version":1}`)); err != nil || l.Tools == nil {
		t.Errorf("lock without tools: %v, %v", l, err)
	}
	if _, err := ReadLock(filepath.Join(t.TempDir(), "missing.lock")); err == nil {
		t.Error("read a missing lock")
	}
}

func TestLockReviewed(t *testing.T) {
	lock := &Lock{Tools: map[string]string{"read": hashA}}
	tests := []struct {
		name       string
		lock       *Lock
		tool, hash string
		want       bool
	}{
		{"locked hash", lock, "read", hashA, true},
		{"changed hash", lock, "read", hashB, false},
		{"unknown tool", lock, "write", hashA, false},
		{"case variant", lock, "Read", hashA, false},
		{"empty hash", &Lock{Tools: map[string]string{"read": ""}}, "read", "", false},
		{"nil lock", nil, "read", hashA, false},
	}
	for _, tt := range tests {
		if got := tt.lock.Reviewed(tt.tool, tt.hash); got != tt.want {
			t.Errorf("%s: got %v", tt.name, got)
		}
	}
}

func TestDiff(t *testing.T) {
	lock := &Lock{Tools: map[string]string{"kept": hashA, "changed": hashA, "removed": hashC}}
	current := map[string]string{"kept": hashA, "changed": hashB, "added": hashC}
	want := []Change{
		{Tool: "added", Kind: Added, New: hashC},
		{Tool: "changed", Kind: Changed, Old: hashA, New: hashB},
		{Tool: "removed", Kind: Removed, Old: hashC},
	}
	if got := Diff(lock, current); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if got := Diff(lock, lock.Tools); len(got) != 0 {
		t.Errorf("no change: got %v", got)
	}
	if got := Diff(nil, map[string]string{"x": hashA}); !reflect.DeepEqual(got, []Change{{Tool: "x", Kind: Added, New: hashA}}) {
		t.Errorf("nil lock: got %v", got)
	}
	if got := Diff(lock, nil); len(got) != 3 {
		t.Errorf("nothing offered: got %v", got)
	}
	for _, c := range want {
		if s := c.String(); !strings.Contains(s, `"`+c.Tool+`"`) {
			t.Errorf("%q lacks the tool name", s)
		}
	}
}

// A lock made by NewLock keeps each definition beside its hash, through
// Write and ReadLock; a kept definition that does not hash to its entry,
// names another tool or has no entry is refused.
func TestLockKeepsDefinitions(t *testing.T) {
	defs := []ToolDefinition{
		{Name: "notes_list", Description: "Lists your notes.", InputSchema: []byte(`{"type":"object"}`)},
		{Name: "github__create_issue", Title: "Create an issue", InputSchema: []byte(`{"type":"object","properties":{"title":{"type":"string"}}}`)},
	}
	lock, err := NewLock(defs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tools.lock")
	if err := lock.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLock(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		h, _ := DefinitionHash(d)
		kept := got.Definitions[d.Name]
		// The schema's whitespace may differ: not what the hash covers.
		if again, _ := DefinitionHash(kept); got.Tools[d.Name] != h || again != h || kept.Description != d.Description || kept.Title != d.Title {
			t.Errorf("%s: read back %s %+v, want %s %+v", d.Name, got.Tools[d.Name], kept, h, d)
		}
	}
	h0, _ := DefinitionHash(defs[0])
	for name, bad := range map[string]string{
		"another definition": `{"version":1,"tools":{"notes_list":"` + h0 + `"},"definitions":{"notes_list":{"name":"notes_list","description":"Sends your notes elsewhere."}}}`,
		"another name":       `{"version":1,"tools":{"notes_list":"` + h0 + `"},"definitions":{"notes_list":{"name":"notes_read","description":"Lists your notes."}}}`,
		"no entry":           `{"version":1,"tools":{},"definitions":{"notes_list":{"name":"notes_list","description":"Lists your notes."}}}`,
		"an unknown member":  `{"version":1,"tools":{"notes_list":"` + h0 + `"},"definitions":{"notes_list":{"name":"notes_list","extra":1}}}`,
	} {
		if _, err := parseLock([]byte(bad)); err == nil {
			t.Errorf("%s: a lock whose kept definition is wrong was accepted", name)
		}
	}
}
