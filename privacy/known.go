package privacy

import (
	"context"
	"errors"

	"github.com/usherhq/usher/store"
)

// Lookup finds what Usher keeps of a person (a store.Store does).
type Lookup interface {
	Store
	QueryAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditRecord, error)
}

// Known reports whether Usher keeps anything of the person principal: an
// audit record that names them, or anything Erase would erase (a person
// under a legal hold is known). A command given a principal id by hand
// asks it first, to tell a mistyped id from a person: an id Usher never
// saw is taken all the same, and matches no one.
func Known(ctx context.Context, st Lookup, principal string) (bool, error) {
	recs, err := st.QueryAudit(ctx, store.AuditQuery{Principal: principal, Limit: 1})
	if err != nil || len(recs) > 0 {
		return len(recs) > 0, err
	}
	e, err := Erase(ctx, st, nil, principal, "", true)
	if errors.Is(err, store.ErrLegalHold) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	e.Principal = ""
	return e != store.PrincipalErasure{}, nil
}
