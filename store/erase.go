package store

import (
	"context"
	"errors"
)

// ErasureAudit returns the builder of the audit record of a person's
// erasure, given what was erased (PrincipalErasure), which
// ErasePrincipal appends in the erasure's transaction.
type ErasureAudit func(PrincipalErasure) (func(AuditHead) (AuditRecord, error), error)

// PrincipalErasure counts the rows of one person that ErasePrincipal
// erased, by what they held.
type PrincipalErasure struct {
	Principal string `json:"principal"`
	// Runs are their conversations, deleted or not, with everything in
	// them: messages, branches, snapshots, steps, pins and approvals.
	Runs int64 `json:"runs"`
	// Approvals are the approvals of their calls outside a conversation
	// (an MCP client's).
	Approvals int64 `json:"approvals"`
	// Executions are the records of their tool calls, with the results.
	Executions  int64 `json:"executions"`
	Notes       int64 `json:"notes"`
	Attachments int64 `json:"attachments"`
	// Settings are their settings (0 or 1) and UsageDays the rows of
	// their model usage.
	Settings  int64 `json:"settings"`
	UsageDays int64 `json:"usageDays"`
	// Sessions are their browser sessions, OAuth their authorization
	// codes, refresh tokens and consents, and MCPSessions their MCP
	// sessions. (The events an MCP stream keeps for its resumption name
	// no one, and go within MCPEventRetention.)
	Sessions    int64 `json:"sessions"`
	OAuth       int64 `json:"oauth"`
	MCPSessions int64 `json:"mcpSessions"`
}

// The statements of an erasure, $1 the principal, in the order they run:
// what names the person's runs before the runs, contents after the
// attachments that name them.
var (
	eraseRunsSearch      = perEngine(``, `DELETE FROM run_search WHERE run_id IN (SELECT id FROM runs WHERE owner = $1)`)
	eraseExecutions      = sql1(`DELETE FROM tool_executions WHERE principal = $1 OR run_id IN (SELECT id FROM runs WHERE owner = $1)`)
	eraseAttachments     = sql1(`DELETE FROM attachments WHERE owner = $1`)
	eraseContents        = sql1(`DELETE FROM attachment_contents WHERE owner = $1`)
	eraseRuns            = sql1(`DELETE FROM runs WHERE owner = $1`)
	eraseApprovals       = sql1(`DELETE FROM approvals WHERE principal = $1`)
	eraseNotes           = sql1(`DELETE FROM notes WHERE owner = $1`)
	eraseSettings        = sql1(`DELETE FROM user_settings WHERE principal = $1`)
	erasePins            = sql1(`DELETE FROM run_pins WHERE principal = $1`)
	eraseUsage           = sql1(`DELETE FROM model_usage WHERE principal = $1`)
	eraseBrowserSessions = sql1(`DELETE FROM browser_sessions WHERE principal = $1`)
	eraseOAuthCodes      = sql1(`DELETE FROM oauth_codes WHERE principal = $1`)
	eraseRefreshTokens   = sql1(`DELETE FROM oauth_refresh_tokens WHERE principal = $1`)
	eraseConsents        = sql1(`DELETE FROM oauth_consents WHERE principal = $1`)
	eraseMCPSessions     = sql1(`DELETE FROM mcp_sessions WHERE principal = $1`)
	ownRuns              = sql1(`SELECT ` + runColumns + ` FROM runs WHERE owner = $1`)
)

// ErasePrincipal erases everything Usher holds of the person principal
// but the audit log's records — their conversations, deleted or not, with
// all they hold, the approvals and records of their tool calls, their
// notes, attachments, settings, pins and model usage, their browser, OAuth
// and MCP sessions — in one transaction with the audit record audit
// builds of it (none when audit, or what it returns, is nil), and returns
// what it erased. Their conversations' live updates are told. A
// conversation of theirs that a replica is working on ends there: its
// next write finds nothing. ErrInvalid for an empty principal.
func (c *core) ErasePrincipal(ctx context.Context, principal string, audit ErasureAudit) (PrincipalErasure, error) {
	if principal == "" {
		return PrincipalErasure{}, c.fail(invalid(errors.New("erase: the principal is empty")))
	}
	if err := invalid(checkText("the principal", principal)); err != nil {
		return PrincipalErasure{}, c.fail(err)
	}
	var out PrincipalErasure
	err := c.inTx(ctx, func(tx executor) error {
		out = PrincipalErasure{Principal: principal}
		// No run of theirs is opened meanwhile (see lockOwnerRuns).
		if _, err := tx.exec(ctx, lockOwnerRuns, principal); err != nil {
			return err
		}
		// Nor is a legal hold placed (PlaceLegalHold takes that lock too).
		switch held, err := underLegalHold(ctx, tx, principal); {
		case err != nil:
			return err
		case held:
			return ErrLegalHold
		}
		runs, err := queryAll(ctx, tx, ownRuns, scanRun, principal)
		if err != nil {
			return err
		}
		for _, s := range []struct {
			stmt  stmt
			count *int64
		}{
			{eraseRunsSearch, nil},
			{eraseExecutions, &out.Executions},
			{eraseAttachments, &out.Attachments},
			{eraseContents, nil},
			{eraseRuns, &out.Runs},
			{eraseApprovals, &out.Approvals},
			{eraseNotes, &out.Notes},
			{eraseSettings, &out.Settings},
			{erasePins, nil},
			{eraseUsage, &out.UsageDays},
			{eraseBrowserSessions, &out.Sessions},
			{eraseOAuthCodes, &out.OAuth},
			{eraseRefreshTokens, &out.OAuth},
			{eraseConsents, &out.OAuth},
			{eraseMCPSessions, &out.MCPSessions},
		} {
			n, err := tx.exec(ctx, s.stmt, principal)
			if err != nil {
				return err
			}
			if s.count != nil {
				*s.count += n
			}
		}
		tx.notifyRuns(runs...)
		return appendAuditOf(ctx, tx, out, audit)
	})
	if err != nil {
		return PrincipalErasure{}, c.fail(err)
	}
	return out, nil
}
