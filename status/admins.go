package status

import "github.com/usherhq/usher/internal/identity"

// Admins are the admins' groups (config admin.groups).
type Admins []string

// IsAdmin reports whether p is an admin: one of the groups is among p's
// groups or app roles. An empty group names no one, nor does an empty
// list.
func (a Admins) IsAdmin(p identity.Principal) bool { return p.InAnyOf(a) }
