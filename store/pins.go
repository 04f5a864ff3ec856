package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Pin is a run a person pinned to the top of their list.
type Pin struct {
	RunID    string
	PinnedAt time.Time
}

var (
	// pinRun pins the run $2 for its owner $1 (a run of another owner,
	// deleted or missing gives no row); pinning it again keeps the first
	// pin's time.
	pinRun = sql1(`
INSERT INTO run_pins (principal, run_id, pinned_at)
SELECT owner, id, $3 FROM runs WHERE id = $2 AND owner = $1 AND deleted_at IS NULL
ON CONFLICT (principal, run_id) DO UPDATE SET pinned_at = run_pins.pinned_at
RETURNING run_id, pinned_at`)

	unpinRun = sql1(`DELETE FROM run_pins WHERE principal = $1 AND run_id = $2`)

	listPins = sql1(`
SELECT p.run_id, p.pinned_at FROM run_pins p JOIN runs r ON r.id = p.run_id
WHERE p.principal = $1 AND r.deleted_at IS NULL
ORDER BY p.pinned_at DESC, p.run_id`)
)

func (c *core) PinRun(ctx context.Context, principal, runID string) (Pin, error) {
	var p Pin
	err := c.writeOne(ctx, func(x executor) (err error) {
		p, err = scanPin(x.row(ctx, pinRun, principal, runID, storedTime(c.now())))
		if errors.Is(err, sql.ErrNoRows) {
			err = ErrNotFound
		}
		return err
	})
	return p, c.fail(err)
}

func (c *core) UnpinRun(ctx context.Context, principal, runID string) error {
	return c.fail(c.writeOne(ctx, func(x executor) error {
		_, err := x.exec(ctx, unpinRun, principal, runID)
		return err
	}))
}

func (c *core) ListPins(ctx context.Context, principal string) ([]Pin, error) {
	pins, err := queryAll(ctx, c.reader(), listPins, scanPin, principal)
	return pins, c.fail(err)
}

// scanPin reads one row of run_id, pinned_at.
func scanPin(row rowScanner) (Pin, error) {
	var p Pin
	err := row.Scan(&p.RunID, at(&p.PinnedAt))
	return p, err
}
