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

// WriteText tells what an erasure erased, or with dryRun would erase,
// in a line that names no one: the caller names the person, as its
// output needs (a terminal's must not carry their id's control
// characters).
func WriteText(w io.Writer, e store.PrincipalErasure, dryRun bool) error {
	verb := "erased"
	if dryRun {
		verb = "would erase"
	}
	_, err := fmt.Fprintf(w, "%s %s (with their messages and approvals), %s of calls outside them, "+
		"%s, %s, %s, %s, %s of model usage, %s, %s, %s\n",
		verb, count(e.Runs, "conversation", "conversations"), count(e.Approvals, "approval", "approvals"),
		count(e.Executions, "tool call record", "tool call records"), count(e.Notes, "note", "notes"),
		count(e.Attachments, "attachment", "attachments"), count(e.Settings, "setting", "settings"),
		count(e.UsageDays, "day", "days"), count(e.Sessions, "browser session", "browser sessions"),
		count(e.OAuth, "OAuth code, token or consent", "OAuth codes, tokens and consents"),
		count(e.MCPSessions, "MCP session", "MCP sessions"))
	return err
}

// count is n and the noun, one or many.
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
