package policy

import (
	_ "embed"
	"fmt"
	"sync"
)

// DefaultName is the name the default policy is parsed under.
const DefaultName = "default.cedar"

//go:embed default.cedar
var defaultSource []byte

// Default returns the default policy, shipped in the binary: the read-only
// built-in tools (sessions_list, session_read, approvals_list, notes_list,
// notes_read) are allowed, notes_delete is denied, and everything else —
// notes_write, and every tool of every upstream — needs approval.
//
// The package's tests parse the embedded file, so Default can only panic
// in a binary built from a source tree whose tests fail.
func Default() *Policy {
	return defaultPolicy()
}

var defaultPolicy = sync.OnceValue(func() *Policy {
	p, err := Parse(DefaultName, defaultSource)
	if err != nil {
		panic(fmt.Sprintf("policy: embedded default policy is invalid: %v", err))
	}
	return p
})
