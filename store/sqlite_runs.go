package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The assistant runtime's queue on SQLite. Every write transaction holds
// the database's one write lock (BEGIN IMMEDIATE), so reading a run's state
// and writing it in one transaction is a compare-and-swap.

const (
	sqliteRunByIdempotencyKey = `SELECT ` + runColumns + ` FROM runs WHERE owner = ? AND idempotency_key = ?`

	sqliteCountActive = `
SELECT count(*) FROM runs
WHERE owner = ? AND status IN ('InProgress', 'AwaitingApproval') AND deleted_at IS NULL`

	sqliteQueueRun = `
UPDATE runs SET status = ?2, queued_at = coalesce(queued_at, ?3), updated_at = ?3
WHERE id = ?1
RETURNING ` + runColumns

	sqliteClaimable = `
SELECT id FROM runs
WHERE status = 'InProgress' AND deleted_at IS NULL
  AND ((queued_at IS NOT NULL AND lease_owner IS NULL) OR lease_expires_at < ?1)
ORDER BY coalesce(queued_at, lease_expires_at)
LIMIT ?2`

	sqliteClaimRun = `
UPDATE runs SET lease_owner = ?2, lease_expires_at = ?3, fencing_token = fencing_token + 1, queued_at = NULL
WHERE id = ?1
RETURNING ` + runColumns

	sqliteRenewLease = `
UPDATE runs SET lease_expires_at = ?4
WHERE id = ?1 AND lease_owner = ?2 AND fencing_token = ?3`

	sqliteFence = `SELECT coalesce(lease_owner = ?2 AND fencing_token = ?3, 0) FROM runs WHERE id = ?1`

	sqliteReleaseRun = `
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, status = ?4,
	updated_at = CASE WHEN status = ?4 THEN updated_at ELSE ?5 END
WHERE id = ?1 AND lease_owner = ?2 AND fencing_token = ?3
RETURNING ` + runColumns

	sqliteRequeueRun = `
UPDATE runs SET status = 'InProgress', queued_at = coalesce(queued_at, ?2),
	updated_at = CASE WHEN status = 'InProgress' THEN updated_at ELSE ?2 END
WHERE id = ?1 AND status IN ('InProgress', 'AwaitingApproval') AND deleted_at IS NULL
RETURNING ` + runColumns

	sqliteCloseRun = `
UPDATE runs SET status = ?2, completed_at = ?3, updated_at = ?3, deleted_at = ?4,
	lease_owner = NULL, lease_expires_at = NULL, queued_at = NULL, fencing_token = fencing_token + 1
WHERE id = ?1
RETURNING ` + runColumns

	sqliteDeleteClosedRun = `UPDATE runs SET deleted_at = ?2 WHERE id = ?1`

	sqliteParkIdleRuns = `
UPDATE runs SET status = 'Idle', updated_at = ?2
WHERE status = 'InProgress' AND deleted_at IS NULL AND lease_owner IS NULL
  AND queued_at IS NULL AND turn_seq = 0 AND last_activity_at < ?1
RETURNING ` + runColumns

	sqliteRunsToResume = `
SELECT ` + runColumns + ` FROM runs r
WHERE deleted_at IS NULL AND (
	(status = 'AwaitingApproval'
	  AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.status = 'pending'))
	OR (status = 'InProgress' AND turn_seq <> 0 AND lease_owner IS NULL AND queued_at IS NULL))
ORDER BY updated_at
LIMIT ?`

	sqliteFirstMessages = `
SELECT ` + eventColumns + ` FROM run_events
WHERE run_id = ?1 AND type LIKE 'message.%' AND seq > ?2 AND seq < ?3
ORDER BY seq
LIMIT ?4`

	sqliteLastMessages = `
SELECT ` + eventColumns + ` FROM run_events
WHERE run_id = ?1 AND type LIKE 'message.%' AND seq > ?2 AND seq < ?3
ORDER BY seq DESC
LIMIT ?4`

	sqliteAdvanceRun = `
UPDATE runs SET last_seq = last_seq + 1, updated_at = ?2, last_activity_at = ?2,
	message_count = message_count + ?3,
	preview = CASE WHEN ?4 = '' THEN preview ELSE ?4 END,
	turn_seq = CASE WHEN ?5 > 0 THEN ?5 WHEN ?6 THEN 0 ELSE turn_seq END,
	handled_seq = CASE WHEN ?6 THEN turn_seq ELSE handled_seq END
WHERE id = ?1
RETURNING last_seq, owner`
)

// appendEventsTx appends events inside the caller's write transaction, and
// queues their notifications in p, to publish once it commits.
func (s *sqliteStore) appendEventsTx(ctx context.Context, tx *sql.Tx, runID string, events []preparedEvent, p *pendingUpdates) ([]Event, error) {
	now := storedTime(s.now())
	at := sqliteTime(now)
	out := make([]Event, 0, len(events))
	for _, e := range events {
		count := 0
		if e.message {
			count = 1
		}
		ev := Event{RunID: runID, Type: e.Type, Payload: e.Payload, CreatedAt: now}
		var owner string
		if err := tx.QueryRowContext(ctx, sqliteAdvanceRun, runID, at, count, e.Preview, e.StartsTurn, e.EndsTurn).Scan(&ev.Seq, &owner); err != nil {
			return nil, err
		}
		p.add(Notification{Kind: NotifyEvent, RunID: runID, Owner: owner, Seq: ev.Seq})
		if _, err := tx.ExecContext(ctx, sqliteInsertEvent, ev.RunID, ev.Seq, ev.Type, string(ev.Payload), at); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// lockedRun reads a run inside a write transaction, which already excludes
// every other writer.
func lockedRun(ctx context.Context, tx *sql.Tx, id string) (Run, error) {
	return scanSQLiteRun(tx.QueryRowContext(ctx, sqliteGetRun, id))
}

func (s *sqliteStore) OpenRun(ctx context.Context, r Run, maxActive int, first *NewEvent) (Run, bool, error) {
	r.Status = RunInProgress
	if err := checkNewRun(r); err != nil {
		return Run{}, false, err
	}
	var firsts []preparedEvent
	if first != nil {
		var err error
		if firsts, err = prepareEvents([]NewEvent{*first}); err != nil {
			return Run{}, false, err
		}
	}
	now := sqliteTime(s.now())
	var out Run
	created := false
	var p pendingUpdates
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if r.IdempotencyKey != "" {
			existing, err := scanSQLiteRun(tx.QueryRowContext(ctx, sqliteRunByIdempotencyKey, r.Owner, r.IdempotencyKey))
			if err == nil {
				out = existing
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		var active int
		if err := tx.QueryRowContext(ctx, sqliteCountActive, r.Owner).Scan(&active); err != nil {
			return err
		}
		if active >= maxActive {
			return ErrLimit
		}
		var queuedAt any
		if first != nil {
			queuedAt = now
		}
		var err error
		out, err = scanSQLiteRun(tx.QueryRowContext(ctx, sqliteInsertRun,
			r.ID, r.Owner, r.Title, string(r.Status), nullString(r.IdempotencyKey), queuedAt, now))
		if err != nil {
			return err
		}
		created = true
		if first == nil {
			return nil
		}
		if _, err := s.appendEventsTx(ctx, tx, r.ID, firsts, &p); err != nil {
			return err
		}
		out, err = lockedRun(ctx, tx, r.ID)
		return err
	})
	if err != nil {
		return Run{}, false, sqliteError(err)
	}
	if created {
		p.add(Notification{Kind: NotifyRun, RunID: out.ID, Owner: out.Owner})
		s.publish(&p)
	}
	if created && first != nil {
		s.wakes.wake()
	}
	return out, created, nil
}

func (s *sqliteStore) PostMessage(ctx context.Context, runID string, e NewEvent) (Event, Run, error) {
	events, err := prepareEvents([]NewEvent{e})
	if err != nil {
		return Event{}, Run{}, err
	}
	var ev Event
	var out Run
	var p pendingUpdates
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		r, err := lockedRun(ctx, tx, runID)
		switch {
		case err != nil:
			return err
		case !r.DeletedAt.IsZero():
			return ErrNotFound
		case r.Status.Terminal():
			return ErrClosed
		}
		status := r.Status
		if status == RunIdle {
			status = RunInProgress
		}
		appended, err := s.appendEventsTx(ctx, tx, runID, events, &p)
		if err != nil {
			return err
		}
		ev = appended[0]
		out, err = scanSQLiteRun(tx.QueryRowContext(ctx, sqliteQueueRun, runID, string(status), sqliteTime(ev.CreatedAt)))
		return err
	})
	if err != nil {
		return Event{}, Run{}, sqliteError(err)
	}
	s.publish(&p)
	s.wakes.wake()
	return ev, out, nil
}

func (s *sqliteStore) ClaimRuns(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]Run, error) {
	if owner == "" {
		return nil, invalid(errors.New("claim owner is empty"))
	}
	if err := errors.Join(checkListLimit(limit), checkLeaseFor(leaseFor)); err != nil {
		return nil, err
	}
	now := storedTime(s.now())
	var runs []Run
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, sqliteClaimable, sqliteTime(now), limit)
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for _, id := range ids {
			r, err := scanSQLiteRun(tx.QueryRowContext(ctx, sqliteClaimRun, id, owner, sqliteTime(now.Add(leaseFor))))
			if err != nil {
				return err
			}
			runs = append(runs, r)
		}
		return nil
	})
	if err != nil {
		return nil, sqliteError(err)
	}
	s.publishRuns(runs)
	return runs, nil
}

func (s *sqliteStore) RenewLease(ctx context.Context, l Lease, leaseFor time.Duration) (Lease, error) {
	if err := errors.Join(checkLease(l), checkLeaseFor(leaseFor)); err != nil {
		return Lease{}, err
	}
	until := storedTime(s.now().Add(leaseFor))
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, sqliteRenewLease, l.RunID, l.Owner, l.Token, sqliteTime(until))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		return s.missingOrConflictTx(ctx, tx, l.RunID)
	})
	if err != nil {
		return Lease{}, sqliteError(err)
	}
	l.ExpiresAt = until
	return l, nil
}

// missingOrConflictTx explains why a conditioned write touched no row.
func (s *sqliteStore) missingOrConflictTx(ctx context.Context, tx *sql.Tx, id string) error {
	var exists bool
	if err := tx.QueryRowContext(ctx, sqliteRunExists, id).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return ErrNotFound
	}
	return ErrConflict
}

// fence checks, inside a write transaction, that l still holds its lease.
func (s *sqliteStore) fence(ctx context.Context, tx *sql.Tx, l Lease) error {
	var held bool
	err := tx.QueryRowContext(ctx, sqliteFence, l.RunID, l.Owner, l.Token).Scan(&held)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if !held {
		return ErrConflict
	}
	return nil
}

func (s *sqliteStore) AppendLeased(ctx context.Context, l Lease, events ...NewEvent) ([]Event, error) {
	if err := checkLease(l); err != nil {
		return nil, err
	}
	prepared, err := prepareEvents(events)
	if err != nil {
		return nil, err
	}
	var out []Event
	var p pendingUpdates
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.fence(ctx, tx, l); err != nil {
			return err
		}
		out, err = s.appendEventsTx(ctx, tx, l.RunID, prepared, &p)
		return err
	})
	if err != nil {
		return nil, sqliteError(err)
	}
	s.publish(&p)
	return out, nil
}

func (s *sqliteStore) ReleaseRun(ctx context.Context, l Lease, to RunStatus) (Run, error) {
	if err := checkLease(l); err != nil {
		return Run{}, err
	}
	switch to {
	case "":
		to = RunInProgress
	case RunInProgress, RunAwaitingApproval:
	default:
		return Run{}, invalid(fmt.Errorf("a released run goes to InProgress or AwaitingApproval, not %q", to))
	}
	now := sqliteTime(s.now())
	var out Run
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanSQLiteRun(tx.QueryRowContext(ctx, sqliteReleaseRun, l.RunID, l.Owner, l.Token, string(to), now))
		if errors.Is(err, sql.ErrNoRows) {
			return s.missingOrConflictTx(ctx, tx, l.RunID)
		}
		return err
	})
	if err != nil {
		return Run{}, sqliteError(err)
	}
	s.publishRuns([]Run{out})
	if !out.QueuedAt.IsZero() && out.Status == RunInProgress {
		s.wakes.wake()
	}
	return out, nil
}

func (s *sqliteStore) RequeueRun(ctx context.Context, runID string) (Run, error) {
	now := sqliteTime(s.now())
	var out Run
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanSQLiteRun(tx.QueryRowContext(ctx, sqliteRequeueRun, runID, now))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		r, err := lockedRun(ctx, tx, runID)
		switch {
		case err != nil:
			return err
		case !r.DeletedAt.IsZero():
			return ErrNotFound
		}
		return ErrConflict
	})
	if err != nil {
		return Run{}, sqliteError(err)
	}
	s.publishRuns([]Run{out})
	s.wakes.wake()
	return out, nil
}

// closeRunTx ends the run r with status to inside a write transaction.
func (s *sqliteStore) closeRunTx(ctx context.Context, tx *sql.Tx, r Run, to RunStatus, deleted bool, turnEnd json.RawMessage, p *pendingUpdates) (Run, error) {
	if r.TurnSeq != 0 {
		end, err := prepareEvents([]NewEvent{{Type: EventTurnEnd, Payload: turnEnd, EndsTurn: true}})
		if err != nil {
			return Run{}, err
		}
		if _, err := s.appendEventsTx(ctx, tx, r.ID, end, p); err != nil {
			return Run{}, err
		}
	}
	now := sqliteTime(s.now())
	var deletedAt any
	if deleted {
		deletedAt = now
	}
	return scanSQLiteRun(tx.QueryRowContext(ctx, sqliteCloseRun, r.ID, string(to), now, deletedAt))
}

func (s *sqliteStore) CloseRun(ctx context.Context, runID string, to RunStatus, turnEnd json.RawMessage) (Run, error) {
	if !to.Terminal() {
		return Run{}, invalid(fmt.Errorf("run status %q is not terminal", to))
	}
	var out Run
	var p pendingUpdates
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		r, err := lockedRun(ctx, tx, runID)
		switch {
		case err != nil:
			return err
		case !r.DeletedAt.IsZero():
			return ErrNotFound
		case r.Status.Terminal():
			return ErrClosed
		}
		out, err = s.closeRunTx(ctx, tx, r, to, false, turnEnd, &p)
		return err
	})
	if err != nil {
		return Run{}, sqliteError(err)
	}
	p.add(Notification{Kind: NotifyRun, RunID: out.ID, Owner: out.Owner})
	s.publish(&p)
	return out, nil
}

func (s *sqliteStore) DeleteRun(ctx context.Context, runID string, turnEnd json.RawMessage) error {
	var p pendingUpdates
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		r, err := lockedRun(ctx, tx, runID)
		switch {
		case err != nil:
			return err
		case !r.DeletedAt.IsZero():
			return ErrNotFound
		}
		p.add(Notification{Kind: NotifyRun, RunID: r.ID, Owner: r.Owner})
		if r.Status.Terminal() {
			_, err = tx.ExecContext(ctx, sqliteDeleteClosedRun, runID, sqliteTime(s.now()))
			return err
		}
		_, err = s.closeRunTx(ctx, tx, r, RunCancelled, true, turnEnd, &p)
		return err
	})
	if err != nil {
		return sqliteError(err)
	}
	s.publish(&p)
	return nil
}

func (s *sqliteStore) ParkIdleRuns(ctx context.Context, quietSince time.Time) ([]Run, error) {
	var runs []Run
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, sqliteParkIdleRuns, sqliteTime(quietSince), sqliteTime(s.now()))
		if err != nil {
			return err
		}
		runs, err = scanSQLiteRuns(rows)
		return err
	})
	if err != nil {
		return nil, sqliteError(err)
	}
	s.publishRuns(runs)
	return runs, nil
}

func (s *sqliteStore) RunsToResume(ctx context.Context, limit int) ([]Run, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, sqliteRunsToResume, limit)
	if err != nil {
		return nil, sqliteError(err)
	}
	runs, err := scanSQLiteRuns(rows)
	return runs, sqliteError(err)
}

func (s *sqliteStore) ListMessages(ctx context.Context, runID string, q MessageQuery) ([]Event, error) {
	if err := checkMessageQuery(q); err != nil {
		return nil, err
	}
	query := sqliteFirstMessages
	if q.Last {
		query = sqliteLastMessages
	}
	events, err := s.queryEvents(ctx, query, runID, q.After, beforeOrMax(q.Before), q.Limit)
	if err != nil {
		return nil, sqliteError(err)
	}
	if q.Last {
		slices.Reverse(events)
	}
	if len(events) == 0 {
		if _, err := s.GetRun(ctx, runID); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// pendingUpdates collects the notifications of a transaction, published
// once it commits.
type pendingUpdates struct{ list []Notification }

func (p *pendingUpdates) add(n Notification) { p.list = append(p.list, n) }

// publish sends the collected notifications.
func (s *sqliteStore) publish(p *pendingUpdates) {
	for _, n := range p.list {
		s.updates.publish(n)
	}
}

// publishRuns announces changes of run rows.
func (s *sqliteStore) publishRuns(runs []Run) {
	for _, r := range runs {
		s.updates.publish(Notification{Kind: NotifyRun, RunID: r.ID, Owner: r.Owner})
	}
}

// scanSQLiteRuns reads rows of runColumns and closes them.
func scanSQLiteRuns(rows *sql.Rows) ([]Run, error) {
	defer rows.Close()
	var runs []Run
	for rows.Next() {
		r, err := scanSQLiteRun(rows)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, rows.Err()
}
