package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The assistant runtime's queue on PostgreSQL. The runs table is the queue:
// a claim is one UPDATE over rows picked FOR UPDATE SKIP LOCKED, and every
// write of a turn is conditioned on the fencing token its claim set.

const (
	// pgOwnerLock serialises the creations of one owner's runs, so that
	// counting the active runs and inserting one is atomic across
	// processes.
	pgOwnerLock = `SELECT pg_advisory_xact_lock(hashtextextended('usher.runs.owner.' || $1, 0))`

	pgRunByIdempotencyKey = `SELECT ` + runColumns + ` FROM runs WHERE owner = $1 AND idempotency_key = $2`

	pgCountActive = `
SELECT count(*) FROM runs
WHERE owner = $1 AND status IN ('InProgress', 'AwaitingApproval') AND deleted_at IS NULL`

	// pgLockRun takes the run's row lock for a write that depends on its
	// state.
	pgLockRun = `SELECT ` + runColumns + ` FROM runs WHERE id = $1 FOR UPDATE`

	// pgWakeRun wakes an Idle run and queues it; $3 is the status to set.
	pgQueueRun = `
UPDATE runs SET status = $2, queued_at = coalesce(queued_at, $3), updated_at = $3
WHERE id = $1
RETURNING ` + runColumns

	pgClaimRuns = `
UPDATE runs SET lease_owner = $1, lease_expires_at = $2, fencing_token = fencing_token + 1, queued_at = NULL
WHERE id IN (
	SELECT id FROM runs
	WHERE status = 'InProgress' AND deleted_at IS NULL
	  AND ((queued_at IS NOT NULL AND lease_owner IS NULL) OR lease_expires_at < $3)
	ORDER BY coalesce(queued_at, lease_expires_at)
	LIMIT $4
	FOR UPDATE SKIP LOCKED)
RETURNING ` + runColumns

	pgRenewLease = `
UPDATE runs SET lease_expires_at = $4
WHERE id = $1 AND lease_owner = $2 AND fencing_token = $3
RETURNING lease_expires_at`

	// pgFence locks the run for a fenced write and tells whether the lease
	// still holds.
	pgFence = `SELECT lease_owner = $2 AND fencing_token = $3 FROM runs WHERE id = $1 FOR UPDATE`

	pgReleaseRun = `
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, status = $4::text,
	updated_at = CASE WHEN status = $4::text THEN updated_at ELSE $5 END
WHERE id = $1 AND lease_owner = $2 AND fencing_token = $3
RETURNING ` + runColumns

	pgRequeueRun = `
UPDATE runs SET status = 'InProgress', queued_at = coalesce(queued_at, $2),
	updated_at = CASE WHEN status = 'InProgress' THEN updated_at ELSE $2 END
WHERE id = $1 AND status IN ('InProgress', 'AwaitingApproval') AND deleted_at IS NULL
RETURNING ` + runColumns

	pgCloseRun = `
UPDATE runs SET status = $2, completed_at = $3, updated_at = $3, deleted_at = $4,
	lease_owner = NULL, lease_expires_at = NULL, queued_at = NULL, fencing_token = fencing_token + 1
WHERE id = $1
RETURNING ` + runColumns

	pgDeleteClosedRun = `UPDATE runs SET deleted_at = $2 WHERE id = $1`

	pgParkIdleRuns = `
UPDATE runs SET status = 'Idle', updated_at = $2
WHERE status = 'InProgress' AND deleted_at IS NULL AND lease_owner IS NULL
  AND queued_at IS NULL AND turn_seq = 0 AND last_activity_at < $1
RETURNING ` + runColumns

	pgRunsToResume = `
SELECT ` + runColumns + ` FROM runs r
WHERE deleted_at IS NULL AND (
	(status = 'AwaitingApproval'
	  AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.status = 'pending'))
	OR (status = 'InProgress' AND turn_seq <> 0 AND lease_owner IS NULL AND queued_at IS NULL))
ORDER BY updated_at
LIMIT $1`

	pgFirstMessages = `
SELECT ` + eventColumns + ` FROM run_events
WHERE run_id = $1 AND type LIKE 'message.%' AND seq > $2 AND seq < $3
ORDER BY seq
LIMIT $4`

	pgLastMessages = `
SELECT ` + eventColumns + ` FROM run_events
WHERE run_id = $1 AND type LIKE 'message.%' AND seq > $2 AND seq < $3
ORDER BY seq DESC
LIMIT $4`

	// pgAppendEvent advances the run's sequence and its summary for one
	// event; the caller holds the run's row lock.
	pgAdvanceRun = `
WITH adv AS (
	UPDATE runs SET last_seq = last_seq + 1, updated_at = $2, last_activity_at = $2,
		message_count = message_count + $3::integer,
		preview = CASE WHEN $4::text = '' THEN preview ELSE $4::text END,
		turn_seq = CASE WHEN $5::bigint > 0 THEN $5::bigint WHEN $6::boolean THEN 0 ELSE turn_seq END,
		handled_seq = CASE WHEN $6::boolean THEN turn_seq ELSE handled_seq END
	WHERE id = $1
	RETURNING last_seq, owner)
SELECT adv.last_seq FROM adv CROSS JOIN LATERAL (
	SELECT pg_notify(` + pgUpdatesChannel + `,
		json_build_object('k', 'event', 'r', $1::text, 'o', adv.owner, 's', adv.last_seq)::text)) AS n`
)

// notifyRun tells live-update subscribers that the run's row changed. It
// is sent after the change committed; a failure is logged, not returned:
// the change stands, and subscribers resynchronise on their own.
func (s *postgresStore) notifyRun(ctx context.Context, r Run) {
	err := pgNotifyOn(ctx, s.poolExec, Notification{Kind: NotifyRun, RunID: r.ID, Owner: r.Owner})
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "store: notifying a run change failed", "run", r.ID, "err", err)
	}
}

// pgNotifyQueued wakes the schedulers of every process listening on this
// schema's queue channel, when the transaction commits.
const pgNotifyQueued = `SELECT pg_notify('usher_queue.' || current_schema(), $1)`

// appendEventsTx appends events under the run's row lock, which the caller
// holds (or takes with the first statement).
func (s *postgresStore) appendEventsTx(ctx context.Context, tx pgx.Tx, runID string, events []preparedEvent) ([]Event, error) {
	now := storedTime(s.now())
	out := make([]Event, 0, len(events))
	for _, e := range events {
		count := 0
		if e.message {
			count = 1
		}
		ev := Event{RunID: runID, Type: e.Type, Payload: e.Payload, CreatedAt: now}
		if err := tx.QueryRow(ctx, pgAdvanceRun, runID, now, count, e.Preview, e.StartsTurn, e.EndsTurn).Scan(&ev.Seq); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, pgInsertEvent, ev.RunID, ev.Seq, ev.Type, []byte(ev.Payload), ev.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}

func (s *postgresStore) OpenRun(ctx context.Context, r Run, maxActive int, first *NewEvent) (Run, bool, error) {
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
	now := storedTime(s.now())
	var out Run
	created := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pgOwnerLock, r.Owner); err != nil {
			return err
		}
		if r.IdempotencyKey != "" {
			existing, err := scanPostgresRun(tx.QueryRow(ctx, pgRunByIdempotencyKey, r.Owner, r.IdempotencyKey))
			if err == nil {
				out = existing
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		var active int
		if err := tx.QueryRow(ctx, pgCountActive, r.Owner).Scan(&active); err != nil {
			return err
		}
		if active >= maxActive {
			return ErrLimit
		}
		var queuedAt *time.Time
		if first != nil {
			queuedAt = &now
		}
		var err error
		out, err = scanPostgresRun(tx.QueryRow(ctx, pgInsertRun,
			r.ID, r.Owner, r.Title, r.Status, nullString(r.IdempotencyKey), queuedAt, now))
		if err != nil {
			return err
		}
		created = true
		if first == nil {
			return nil
		}
		if _, err := s.appendEventsTx(ctx, tx, r.ID, firsts); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, pgNotifyQueued, r.ID); err != nil {
			return err
		}
		out, err = scanPostgresRun(tx.QueryRow(ctx, pgGetRun, r.ID))
		return err
	})
	if err != nil {
		return Run{}, false, pgError(err)
	}
	if created {
		s.notifyRun(ctx, out)
	}
	return out, created, nil
}

func (s *postgresStore) PostMessage(ctx context.Context, runID string, e NewEvent) (Event, Run, error) {
	events, err := prepareEvents([]NewEvent{e})
	if err != nil {
		return Event{}, Run{}, err
	}
	var ev Event
	var out Run
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := scanPostgresRun(tx.QueryRow(ctx, pgLockRun, runID))
		if err != nil {
			return err
		}
		switch {
		case !r.DeletedAt.IsZero():
			return ErrNotFound
		case r.Status.Terminal():
			return ErrClosed
		}
		status := r.Status
		if status == RunIdle {
			status = RunInProgress
		}
		appended, err := s.appendEventsTx(ctx, tx, runID, events)
		if err != nil {
			return err
		}
		ev = appended[0]
		if out, err = scanPostgresRun(tx.QueryRow(ctx, pgQueueRun, runID, status, ev.CreatedAt)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, pgNotifyQueued, runID)
		return err
	})
	if err != nil {
		return Event{}, Run{}, pgError(err)
	}
	return ev, out, nil
}

func (s *postgresStore) ClaimRuns(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]Run, error) {
	if owner == "" {
		return nil, invalid(errors.New("claim owner is empty"))
	}
	if err := errors.Join(checkListLimit(limit), checkLeaseFor(leaseFor)); err != nil {
		return nil, err
	}
	now := storedTime(s.now())
	rows, err := s.pool.Query(ctx, pgClaimRuns, owner, now.Add(leaseFor), now, limit)
	if err != nil {
		return nil, pgError(err)
	}
	runs, err := collectPostgresRuns(rows)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		s.notifyRun(ctx, r)
	}
	return runs, nil
}

func (s *postgresStore) RenewLease(ctx context.Context, l Lease, leaseFor time.Duration) (Lease, error) {
	if err := errors.Join(checkLease(l), checkLeaseFor(leaseFor)); err != nil {
		return Lease{}, err
	}
	until := storedTime(s.now().Add(leaseFor))
	err := s.pool.QueryRow(ctx, pgRenewLease, l.RunID, l.Owner, l.Token, until).Scan(&l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, s.missingOrConflict(ctx, l.RunID)
	}
	if err != nil {
		return Lease{}, pgError(err)
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	return l, nil
}

// fence takes the run's row lock and checks that l still holds its lease.
func (s *postgresStore) fence(ctx context.Context, tx pgx.Tx, l Lease) error {
	var held *bool
	if err := tx.QueryRow(ctx, pgFence, l.RunID, l.Owner, l.Token).Scan(&held); err != nil {
		return err
	}
	if held == nil || !*held {
		return ErrConflict
	}
	return nil
}

func (s *postgresStore) AppendLeased(ctx context.Context, l Lease, events ...NewEvent) ([]Event, error) {
	if err := checkLease(l); err != nil {
		return nil, err
	}
	prepared, err := prepareEvents(events)
	if err != nil {
		return nil, err
	}
	var out []Event
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.fence(ctx, tx, l); err != nil {
			return err
		}
		out, err = s.appendEventsTx(ctx, tx, l.RunID, prepared)
		return err
	})
	if err != nil {
		return nil, pgError(err)
	}
	return out, nil
}

func (s *postgresStore) ReleaseRun(ctx context.Context, l Lease, to RunStatus) (Run, error) {
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
	now := storedTime(s.now())
	var out Run
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = scanPostgresRun(tx.QueryRow(ctx, pgReleaseRun, l.RunID, l.Owner, l.Token, to, now))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrConflict
		}
		if err != nil {
			return err
		}
		if !out.QueuedAt.IsZero() && out.Status == RunInProgress {
			_, err = tx.Exec(ctx, pgNotifyQueued, l.RunID)
		}
		return err
	})
	if errors.Is(err, ErrConflict) {
		return Run{}, s.missingOrConflict(ctx, l.RunID)
	}
	if err != nil {
		return Run{}, pgError(err)
	}
	s.notifyRun(ctx, out)
	return out, nil
}

func (s *postgresStore) RequeueRun(ctx context.Context, runID string) (Run, error) {
	now := storedTime(s.now())
	var out Run
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if out, err = scanPostgresRun(tx.QueryRow(ctx, pgRequeueRun, runID, now)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, pgNotifyQueued, runID)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		r, err := s.GetRun(ctx, runID)
		switch {
		case err != nil:
			return Run{}, err
		case !r.DeletedAt.IsZero():
			return Run{}, ErrNotFound
		}
		return Run{}, ErrConflict
	}
	if err != nil {
		return Run{}, pgError(err)
	}
	s.notifyRun(ctx, out)
	return out, nil
}

// closeRunTx ends the run r, locked by the caller, with status to.
func (s *postgresStore) closeRunTx(ctx context.Context, tx pgx.Tx, r Run, to RunStatus, deleted bool, turnEnd json.RawMessage) (Run, error) {
	if r.TurnSeq != 0 {
		end, err := prepareEvents([]NewEvent{{Type: EventTurnEnd, Payload: turnEnd, EndsTurn: true}})
		if err != nil {
			return Run{}, err
		}
		if _, err := s.appendEventsTx(ctx, tx, r.ID, end); err != nil {
			return Run{}, err
		}
	}
	now := storedTime(s.now())
	var deletedAt *time.Time
	if deleted {
		deletedAt = &now
	}
	return scanPostgresRun(tx.QueryRow(ctx, pgCloseRun, r.ID, to, now, deletedAt))
}

func (s *postgresStore) CloseRun(ctx context.Context, runID string, to RunStatus, turnEnd json.RawMessage) (Run, error) {
	if !to.Terminal() {
		return Run{}, invalid(fmt.Errorf("run status %q is not terminal", to))
	}
	var out Run
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := scanPostgresRun(tx.QueryRow(ctx, pgLockRun, runID))
		switch {
		case err != nil:
			return err
		case !r.DeletedAt.IsZero():
			return ErrNotFound
		case r.Status.Terminal():
			return ErrClosed
		}
		out, err = s.closeRunTx(ctx, tx, r, to, false, turnEnd)
		return err
	})
	if err != nil {
		return Run{}, pgError(err)
	}
	s.notifyRun(ctx, out)
	return out, nil
}

func (s *postgresStore) DeleteRun(ctx context.Context, runID string, turnEnd json.RawMessage) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := scanPostgresRun(tx.QueryRow(ctx, pgLockRun, runID))
		switch {
		case err != nil:
			return err
		case !r.DeletedAt.IsZero():
			return ErrNotFound
		case r.Status.Terminal():
			_, err = tx.Exec(ctx, pgDeleteClosedRun, runID, storedTime(s.now()))
			return err
		}
		_, err = s.closeRunTx(ctx, tx, r, RunCancelled, true, turnEnd)
		return err
	})
	if err == nil {
		if r, err := s.GetRun(ctx, runID); err == nil {
			s.notifyRun(ctx, r)
		}
	}
	return pgError(err)
}

func (s *postgresStore) ParkIdleRuns(ctx context.Context, quietSince time.Time) ([]Run, error) {
	rows, err := s.pool.Query(ctx, pgParkIdleRuns, storedTime(quietSince), storedTime(s.now()))
	if err != nil {
		return nil, pgError(err)
	}
	runs, err := collectPostgresRuns(rows)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		s.notifyRun(ctx, r)
	}
	return runs, nil
}

func (s *postgresStore) RunsToResume(ctx context.Context, limit int) ([]Run, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, pgRunsToResume, limit)
	if err != nil {
		return nil, pgError(err)
	}
	runs, err := collectPostgresRuns(rows)
	if err != nil {
		return nil, err
	}
	return runs, nil
}

func (s *postgresStore) ListMessages(ctx context.Context, runID string, q MessageQuery) ([]Event, error) {
	if err := checkMessageQuery(q); err != nil {
		return nil, err
	}
	query := pgFirstMessages
	if q.Last {
		query = pgLastMessages
	}
	rows, err := s.pool.Query(ctx, query, runID, q.After, beforeOrMax(q.Before), q.Limit)
	if err != nil {
		return nil, pgError(err)
	}
	events, err := pgx.CollectRows(rows, scanPostgresEvent)
	if err != nil {
		return nil, pgError(err)
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

// collectPostgresRuns reads rows of runColumns.
func collectPostgresRuns(rows pgx.Rows) ([]Run, error) {
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanPostgresRun(row) })
	return runs, pgError(err)
}

// scanPostgresEvent reads one row of eventColumns.
func scanPostgresEvent(row pgx.CollectableRow) (Event, error) {
	var e Event
	var payload []byte
	if err := row.Scan(&e.RunID, &e.Seq, &e.Type, &payload, &e.CreatedAt); err != nil {
		return Event{}, err
	}
	e.Payload = payload
	e.CreatedAt = e.CreatedAt.UTC()
	return e, nil
}
