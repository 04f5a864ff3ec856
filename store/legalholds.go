package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrLegalHold refuses to erase the data of a person under a legal hold.
var ErrLegalHold = fmt.Errorf("store: the person's data is under a legal hold: %w", ErrConflict)

// LegalHold keeps a person's data: while it stands nothing erases it (see
// PlaceLegalHold).
type LegalHold struct {
	// Principal is the person, as their runs' owner and the audit log name
	// them.
	Principal string `json:"principal"`
	// Reason says why (a matter's name or number), as the one who placed
	// it wrote it.
	Reason string `json:"reason"`
	// PlacedBy says who placed it, and PlacedAt when: a new reason given
	// later keeps both (the audit log records who gave it).
	PlacedBy string    `json:"placedBy"`
	PlacedAt time.Time `json:"placedAt"`
}

// MaxLegalHoldReason bounds a legal hold's reason, in bytes.
const MaxLegalHoldReason = 1000

// LegalHoldAudit returns the builder of the audit record of a legal hold's
// placement or lifting, which the store appends in that write's
// transaction.
type LegalHoldAudit func(LegalHold) (func(AuditHead) (AuditRecord, error), error)

var (
	placeLegalHold = sql1(`
INSERT INTO legal_holds (principal, reason, placed_by, placed_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (principal) DO UPDATE SET reason = excluded.reason
RETURNING principal, reason, placed_by, placed_at`)
	liftLegalHold  = sql1(`DELETE FROM legal_holds WHERE principal = $1 RETURNING principal, reason, placed_by, placed_at`)
	listLegalHolds = sql1(`SELECT principal, reason, placed_by, placed_at FROM legal_holds ORDER BY placed_at, principal`)
	// heldOwner gives a row when the person $1 is under a legal hold.
	heldOwner = sql1(`SELECT 1 FROM legal_holds WHERE principal = $1`)
	// lockOwnRuns locks the rows of the person $1's runs, and
	// lockOwnContents those of their attachments' contents (on SQLite the
	// write transaction does).
	lockOwnRuns     = postgresOnly(`SELECT id FROM runs WHERE owner = $1 FOR UPDATE`)
	lockOwnContents = postgresOnly(`SELECT sha256 FROM attachment_contents WHERE owner = $1 FOR UPDATE`)
)

// lockForLegalHold serialises a legal hold's placement with what it stops:
// an erasure of the person (which takes lockOwnerRuns), a purge or a
// deletion of one of their runs (which lock its row), and the sweep of
// their unsent attachments (which locks the contents). One that began
// first ends first; one that comes after sees the hold.
func lockForLegalHold(ctx context.Context, tx executor, principal string) error {
	for _, s := range []stmt{lockOwnerRuns, lockOwnRuns, lockOwnContents} {
		if _, err := tx.exec(ctx, s, principal); err != nil {
			return err
		}
	}
	return nil
}

// PlaceLegalHold places a legal hold on the person h.Principal, or gives
// theirs a new reason (keeping when and by whom it was placed), with the audit record audit
// builds of it (none when audit, or what it returns, is nil), in one
// transaction, and returns the hold. While it stands the retention purge
// (PurgeDeletedRuns) skips the person's deleted runs, a deletion of their
// run (DeleteRun, DeleteInactiveRun) keeps its attachments until that
// purge, DeleteUnsentAttachments keeps theirs, and ErasePrincipal refuses
// with ErrLegalHold. ErrInvalid for an empty principal, reason or placer,
// or a reason over MaxLegalHoldReason.
func (c *core) PlaceLegalHold(ctx context.Context, h LegalHold, audit LegalHoldAudit) (LegalHold, error) {
	var errs []error
	for _, f := range []struct{ name, v string }{{"principal", h.Principal}, {"reason", h.Reason}, {"placer", h.PlacedBy}} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("the legal hold's %s is empty", f.name))
		}
		errs = append(errs, checkText("the legal hold's "+f.name, f.v))
	}
	if len(h.Reason) > MaxLegalHoldReason {
		errs = append(errs, fmt.Errorf("the legal hold's reason is over %d bytes", MaxLegalHoldReason))
	}
	if err := invalid(errors.Join(errs...)); err != nil {
		return LegalHold{}, c.fail(err)
	}
	var out LegalHold
	err := c.inTx(ctx, func(tx executor) error {
		if err := lockForLegalHold(ctx, tx, h.Principal); err != nil {
			return err
		}
		var err error
		if out, err = scanLegalHold(tx.row(ctx, placeLegalHold, h.Principal, h.Reason, h.PlacedBy, storedTime(c.now()))); err != nil {
			return err
		}
		return appendAuditOf(ctx, tx, out, audit)
	})
	if err != nil {
		return LegalHold{}, c.fail(err)
	}
	return out, nil
}

// LiftLegalHold lifts the person's legal hold, with the audit record audit
// builds of it as it stood, in one transaction, and returns it; ErrNotFound
// when they have none. What the hold kept is erased by the next purge
// that would have erased it.
func (c *core) LiftLegalHold(ctx context.Context, principal string, audit LegalHoldAudit) (LegalHold, error) {
	var out LegalHold
	err := c.inTx(ctx, func(tx executor) error {
		var err error
		out, err = scanLegalHold(tx.row(ctx, liftLegalHold, principal))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return appendAuditOf(ctx, tx, out, audit)
	})
	if err != nil {
		return LegalHold{}, c.fail(err)
	}
	return out, nil
}

// LegalHolds returns the legal holds that stand, the oldest first.
func (c *core) LegalHolds(ctx context.Context) ([]LegalHold, error) {
	holds, err := queryAll(ctx, c.reader(), listLegalHolds, scanLegalHold)
	return holds, c.fail(err)
}

// underLegalHold reports whether the person is under a legal hold, read in
// tx.
func underLegalHold(ctx context.Context, tx executor, principal string) (bool, error) {
	var one int
	err := tx.row(ctx, heldOwner, principal).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// scanLegalHold reads one row of principal, reason, placed_by, placed_at.
func scanLegalHold(row rowScanner) (LegalHold, error) {
	var h LegalHold
	err := row.Scan(&h.Principal, &h.Reason, &h.PlacedBy, at(&h.PlacedAt))
	return h, err
}
