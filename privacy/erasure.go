package privacy

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// Store erases a person (a store.Store does).
type Store interface {
	ErasePrincipal(ctx context.Context, principal string, audit store.ErasureAudit) (store.PrincipalErasure, error)
}

// errDryRun ends a dry run's transaction, rolled back.
var errDryRun = errors.New("erasure: a dry run")

// Erase erases the person principal from st, recorded in log (kind
// principal_erased, the person as its principal, what was erased and by
// what in its details), and returns what it erased. With dryRun it writes
// nothing and returns what it would have erased.
func Erase(ctx context.Context, st Store, log *audit.Log, principal, by string, dryRun bool) (store.PrincipalErasure, error) {
	var counted store.PrincipalErasure
	out, err := st.ErasePrincipal(ctx, principal, func(e store.PrincipalErasure) (func(store.AuditHead) (store.AuditRecord, error), error) {
		if dryRun {
			counted = e
			return nil, errDryRun
		}
		return record(log, audit.KindPrincipalErased, principal, struct {
			store.PrincipalErasure
			By string `json:"by"`
		}{e, by})
	})
	if dryRun && errors.Is(err, errDryRun) {
		return counted, nil
	}
	return out, err
}

// WriteText tells what an erasure erased, or with dryRun would erase.
func WriteText(w io.Writer, e store.PrincipalErasure, dryRun bool) error {
	verb := "erased"
	if dryRun {
		verb = "would erase"
	}
	_, err := fmt.Fprintf(w, "%s: %s %d conversations (with their messages and approvals), %d approvals of calls outside them, "+
		"%d tool call records, %d notes, %d attachments, %d settings, %d days of model usage, %d browser sessions, "+
		"%d OAuth codes, tokens and consents, %d MCP sessions\n",
		e.Principal, verb, e.Runs, e.Approvals, e.Executions, e.Notes, e.Attachments, e.Settings, e.UsageDays, e.Sessions, e.OAuth, e.MCPSessions)
	return err
}
