package privacy

import (
	"context"
	"encoding/json"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// Holds places and lifts legal holds (a store.Store does).
type Holds interface {
	PlaceLegalHold(ctx context.Context, h store.LegalHold, audit store.LegalHoldAudit) (store.LegalHold, error)
	LiftLegalHold(ctx context.Context, principal string, audit store.LegalHoldAudit) (store.LegalHold, error)
}

// PlaceHold places a legal hold on the person principal's data, or gives
// theirs a new reason, recorded in log in the same transaction (kind
// legal_hold_placed, the person as its principal, the reason and by in
// its details), and returns it. While it stands, nothing erases their
// data: not the retention purge, not a conversation's deletion (which
// keeps its attachments), not Erase.
func PlaceHold(ctx context.Context, st Holds, log *audit.Log, principal, reason, by string) (store.LegalHold, error) {
	return st.PlaceLegalHold(ctx, store.LegalHold{Principal: principal, Reason: reason, PlacedBy: by}, func(h store.LegalHold) (func(store.AuditHead) (store.AuditRecord, error), error) {
		return record(log, audit.KindLegalHoldPlaced, h.Principal, map[string]string{"reason": h.Reason, "by": by})
	})
}

// LiftHold lifts the person principal's legal hold, recorded in log in the
// same transaction (kind legal_hold_lifted, with the hold as it stood and
// by), and returns the hold; store.ErrNotFound when there is none. What
// it kept goes as the retention policy would have let it go.
func LiftHold(ctx context.Context, st Holds, log *audit.Log, principal, by string) (store.LegalHold, error) {
	return st.LiftLegalHold(ctx, principal, func(h store.LegalHold) (func(store.AuditHead) (store.AuditRecord, error), error) {
		return record(log, audit.KindLegalHoldLifted, h.Principal, map[string]string{
			"reason": h.Reason, "placedBy": h.PlacedBy, "placedAt": h.PlacedAt.UTC().Format(time.RFC3339), "by": by})
	})
}

// record is the builder of the audit record of kind about the person
// principal, with details as JSON.
func record(log *audit.Log, kind audit.Kind, principal string, details any) (func(store.AuditHead) (store.AuditRecord, error), error) {
	b, err := json.Marshal(details)
	if err != nil {
		return nil, err
	}
	return log.Builder(audit.Entry{Kind: kind, Principal: principal, Details: b})
}
