package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/usherhq/usher/internal/jcs"
)

// LockVersion is the version of the tool lock file format that
// Lock.Write writes and ReadLock accepts.
const LockVersion = 1

// hashPattern is the shape of a definition hash (see DefinitionHash).
var hashPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Lock is the tool lock: for each reviewed tool, the definition hash a
// person reviewed. A tool missing from the lock, or whose current hash
// differs, is unreviewed and never runs unattended. A nil *Lock reviews
// nothing.
//
// On disk (tools.lock) it is JSON, one tool per line, sorted by name:
//
//	{
//	  "version": 1,
//	  "tools": {
//	    "notes_list": "sha256:…",
//	    "sessions_list": "sha256:…"
//	  }
//	}
//
// It may also keep the reviewed definitions themselves ("definitions",
// by name, which `usher tools lock` writes), so that a reviewer compares
// a changed tool's definition with the one reviewed; each must hash to
// its tool's entry.
type Lock struct {
	// Tools maps each tool's full name to its reviewed definition hash.
	Tools map[string]string
	// Definitions maps a tool's name to the definition its hash was
	// taken of. Optional: nil in a lock that keeps hashes only.
	Definitions map[string]ToolDefinition
}

// lockFile is the on-disk shape of a Lock.
type lockFile struct {
	Version     int                       `json:"version"`
	Tools       map[string]string         `json:"tools"`
	Definitions map[string]ToolDefinition `json:"definitions,omitempty"`
}

// NewLock is the lock that reviews exactly defs, keeping each definition
// beside its hash.
func NewLock(defs []ToolDefinition) (*Lock, error) {
	l := &Lock{Tools: make(map[string]string, len(defs)), Definitions: make(map[string]ToolDefinition, len(defs))}
	for _, d := range defs {
		h, err := DefinitionHash(d)
		if err != nil {
			return nil, fmt.Errorf("tool lock: tool %+q: %w", d.Name, err)
		}
		l.Tools[d.Name], l.Definitions[d.Name] = h, d
	}
	return l, nil
}

// ReadLock reads and validates the tool lock file at path.
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tool lock: %w", err)
	}
	l, err := parseLock(data)
	if err != nil {
		return nil, fmt.Errorf("tool lock %s: %w", path, err)
	}
	return l, nil
}

// parseLock decodes a lock file strictly: I-JSON only (so no duplicate
// names), no unknown members, the current version, and a well-formed hash
// for every named tool.
func parseLock(data []byte) (*Lock, error) {
	if _, err := jcs.Canonicalize(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f lockFile
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	if f.Version != LockVersion {
		return nil, fmt.Errorf("version %d is not supported (want %d)", f.Version, LockVersion)
	}
	l := &Lock{Tools: f.Tools, Definitions: f.Definitions}
	if l.Tools == nil {
		l.Tools = map[string]string{}
	}
	if err := l.validate(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Lock) validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(l.Tools)) {
		if name == "" {
			errs = append(errs, errors.New("a tool has an empty name"))
		}
		if h := l.Tools[name]; !hashPattern.MatchString(h) {
			errs = append(errs, fmt.Errorf("tool %+q: %+q is not a definition hash (sha256:<64 hex digits>)", name, h))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(l.Definitions)) {
		d := l.Definitions[name]
		h, err := DefinitionHash(d)
		switch {
		case d.Name != name:
			errs = append(errs, fmt.Errorf("the definition kept for tool %+q names %+q", name, d.Name))
		case err != nil:
			errs = append(errs, fmt.Errorf("the definition kept for tool %+q: %w", name, err))
		case h != l.Tools[name]:
			errs = append(errs, fmt.Errorf("the definition kept for tool %+q hashes to %s, not to its entry %+q", name, h, l.Tools[name]))
		}
	}
	return errors.Join(errs...)
}

// Write writes the lock to path atomically: a reader sees the old file or
// the new one, never a part.
func (l *Lock) Write(path string) (err error) {
	if err := l.validate(); err != nil {
		return fmt.Errorf("tool lock: %w", err)
	}
	data, err := json.MarshalIndent(lockFile{Version: LockVersion, Tools: l.Tools, Definitions: l.Definitions}, "", "  ")
	if err != nil {
		return fmt.Errorf("tool lock: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("tool lock: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("tool lock: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("tool lock: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tool lock: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("tool lock: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("tool lock: %w", err)
	}
	return nil
}

// Reviewed reports whether the tool name with definition hash hash is the
// one the lock records.
func (l *Lock) Reviewed(name, hash string) bool {
	if l == nil || hash == "" {
		return false
	}
	locked, ok := l.Tools[name]
	return ok && locked == hash
}

// ChangeKind says how a tool differs from the lock.
type ChangeKind string

// The kinds of Change.
const (
	Added   ChangeKind = "added"   // offered now, absent from the lock
	Removed ChangeKind = "removed" // in the lock, no longer offered
	Changed ChangeKind = "changed" // offered with another definition hash
)

// Change is one difference between the lock and the tools offered now.
type Change struct {
	Tool string
	Kind ChangeKind
	Old  string // hash in the lock; empty when Added
	New  string // hash now; empty when Removed
}

// Diff compares the lock with current, the definition hash of every tool
// offered now, by name. It returns the changes sorted by tool name; none
// when every tool is reviewed and nothing was removed.
func Diff(lock *Lock, current map[string]string) []Change {
	var locked map[string]string
	if lock != nil {
		locked = lock.Tools
	}
	var out []Change
	for _, name := range slices.Sorted(maps.Keys(current)) {
		old, ok := locked[name]
		switch {
		case !ok:
			out = append(out, Change{Tool: name, Kind: Added, New: current[name]})
		case old != current[name]:
			out = append(out, Change{Tool: name, Kind: Changed, Old: old, New: current[name]})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(locked)) {
		if _, ok := current[name]; !ok {
			out = append(out, Change{Tool: name, Kind: Removed, Old: locked[name]})
		}
	}
	slices.SortStableFunc(out, func(a, b Change) int { return strings.Compare(a.Tool, b.Tool) })
	return out
}

// String renders the change as `usher tools diff` prints it.
func (c Change) String() string {
	switch c.Kind {
	case Added:
		return fmt.Sprintf("+ %+q %s", c.Tool, c.New)
	case Removed:
		return fmt.Sprintf("- %+q %s", c.Tool, c.Old)
	default:
		return fmt.Sprintf("~ %+q %s -> %s", c.Tool, c.Old, c.New)
	}
}
