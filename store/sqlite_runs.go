package store

import (
	"cmp"
	"context"
	"database/sql"
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

	sqliteClaimable = `
SELECT id FROM runs
WHERE status = 'InProgress' AND deleted_at IS NULL
  AND ((queued_at IS NOT NULL AND lease_owner IS NULL AND (not_before IS NULL OR not_before <= ?1))
    OR lease_expires_at < ?1)
ORDER BY coalesce(queued_at, lease_expires_at)
LIMIT ?2`

	sqliteClaimRun = `
UPDATE runs SET lease_owner = ?2, lease_expires_at = ?3, fencing_token = fencing_token + 1,
	queued_at = NULL, not_before = NULL
WHERE id = ?1
RETURNING ` + runColumns

	sqliteRenewLease = `
UPDATE runs SET lease_expires_at = ?4
WHERE id = ?1 AND lease_owner = ?2 AND fencing_token = ?3`

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
  AND NOT ` + sqliteUnanswered + `
RETURNING ` + runColumns

	sqliteRunsToResume = `
SELECT ` + runColumns + ` FROM runs
WHERE deleted_at IS NULL AND (
	(status = 'AwaitingApproval'
	  AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.id AND a.status = 'pending'))
	OR (status = 'InProgress' AND lease_owner IS NULL AND queued_at IS NULL
	  AND (turn_seq <> 0 OR ` + sqliteUnanswered + `)))
ORDER BY updated_at
LIMIT ?`

	// sqliteUnanswered: the run row has a user message after its
	// HandledSeq.
	sqliteUnanswered = `EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = runs.id
	AND e.type LIKE 'message.%' AND e.type = 'message.user' AND e.seq > runs.handled_seq)`

	// sqliteNextClaim finds the earliest lease expiry of an InProgress
	// run, and the earliest time a queued, unleased one may be claimed.
	sqliteNextClaim = `
SELECT
	(SELECT min(lease_expires_at) FROM runs
	 WHERE lease_expires_at IS NOT NULL AND status = 'InProgress' AND deleted_at IS NULL),
	(SELECT min(coalesce(not_before, queued_at)) FROM runs
	 WHERE queued_at IS NOT NULL AND lease_owner IS NULL AND status = 'InProgress' AND deleted_at IS NULL)`

	sqliteMessageKey = `SELECT seq FROM run_message_keys WHERE run_id = ? AND idempotency_key = ?`

	sqliteInsertMessageKey = `INSERT INTO run_message_keys (run_id, idempotency_key, seq, created_at) VALUES (?, ?, ?, ?)`

	sqliteEventAt = `SELECT ` + eventColumns + ` FROM run_events WHERE run_id = ? AND seq = ?`

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

	// sqliteTurnAfter and sqliteHandledAfter are the run's open turn and
	// handled message once sqliteAdvance has run, as expressions of the
	// row before.
	sqliteTurnAfter    = `CASE WHEN ?6 < 0 THEN turn_seq ELSE ?6 END`
	sqliteHandledAfter = `CASE ?7 WHEN 1 THEN turn_seq WHEN 2 THEN ?8 ELSE handled_seq END`

	// sqliteAdvance is the SET list that advances a run for a batch of ?3
	// events, ?4 of them messages; ?5 to ?8 are the rest of its
	// appendPlan.
	sqliteAdvance = `last_seq = last_seq + ?3,
	last_activity_at = CASE WHEN ?3 > 0 THEN ?2 ELSE last_activity_at END,
	message_count = message_count + ?4,
	preview = CASE WHEN ?5 = '' THEN preview ELSE ?5 END,
	turn_seq = ` + sqliteTurnAfter + `,
	handled_seq = ` + sqliteHandledAfter

	// sqliteAppend advances a run for a batch of events.
	sqliteAppend = `
UPDATE runs SET ` + sqliteAdvance + `, updated_at = ?2
WHERE id = ?1
RETURNING ` + runColumns

	// sqlitePostMessage advances a run that is neither deleted nor
	// terminal for a user message and queues it for a turn (waking it when
	// Idle).
	sqlitePostMessage = `
UPDATE runs SET ` + sqliteAdvance + `, updated_at = ?2,
	status = CASE WHEN status = 'Idle' THEN 'InProgress' ELSE status END,
	queued_at = coalesce(queued_at, ?2)
WHERE id = ?1 AND deleted_at IS NULL AND status NOT IN ('Completed', 'Failed', 'Cancelled')
RETURNING ` + runColumns

	// sqliteAppendLeased is every write of a lease's holder to the run
	// row, fenced by the lease (?9 owner, ?10 fencing token): it advances
	// the run for a batch of events (possibly none) and, with ?11, ends
	// the lease, moving the run to the status ?12 and, with ?13 or when
	// the run is left InProgress with work (an open turn, or a user
	// message after the one it handled), queueing it. ?14, when not NULL,
	// is the retry's not-before time, which counts a failure; a release
	// without resets the count.
	sqliteAppendLeased = `
UPDATE runs SET ` + sqliteAdvance + `,
	updated_at = CASE WHEN ?3 > 0 OR (?11 AND status <> ?12) THEN ?2 ELSE updated_at END,
	lease_owner = CASE WHEN ?11 THEN NULL ELSE lease_owner END,
	lease_expires_at = CASE WHEN ?11 THEN NULL ELSE lease_expires_at END,
	status = CASE WHEN ?11 THEN ?12 ELSE status END,
	queued_at = CASE WHEN ?13 OR (?11 AND ?12 = 'InProgress'
			AND (` + sqliteTurnAfter + ` <> 0 OR EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = runs.id
				AND e.type LIKE 'message.%' AND e.type = 'message.user' AND e.seq > ` + sqliteHandledAfter + `)))
		THEN coalesce(queued_at, ?2) ELSE queued_at END,
	failures = CASE WHEN NOT ?11 THEN failures WHEN ?14 IS NULL THEN 0 ELSE failures + 1 END,
	not_before = CASE WHEN ?11 THEN ?14 ELSE not_before END
WHERE id = ?1 AND lease_owner = ?9 AND fencing_token = ?10
RETURNING ` + runColumns
)

// appendArgs are the arguments ?1 to ?8 of sqliteAppend,
// sqlitePostMessage and sqliteAppendLeased.
func sqliteAppendArgs(runID string, now time.Time, p appendPlan) []any {
	return []any{runID, sqliteTime(now), len(p.events), p.messages, p.preview, p.turn, p.handled, p.handledSeq}
}

// appendTx runs query, one of sqliteAppend, sqlitePostMessage and
// sqliteAppendLeased, inside the caller's write transaction, then inserts
// p's events at the sequences it advanced over, and queues their
// notifications in pu, to publish once the transaction commits.
func (s *sqliteStore) appendTx(ctx context.Context, tx *sql.Tx, query string, args []any, now time.Time, p appendPlan, pu *pendingUpdates) ([]Event, Run, error) {
	r, err := scanSQLiteRun(tx.QueryRowContext(ctx, query, args...))
	if err != nil {
		return nil, Run{}, err
	}
	events := p.appended(r.ID, r.LastSeq, now)
	at := sqliteTime(now)
	for _, e := range events {
		if _, err := tx.ExecContext(ctx, sqliteInsertEvent, e.RunID, e.Seq, e.Type, string(e.Payload), at); err != nil {
			return nil, Run{}, err
		}
		pu.add(Notification{Kind: NotifyEvent, RunID: e.RunID, Owner: r.Owner, Seq: e.Seq})
	}
	return events, r, nil
}

// appendEventsTx appends events inside the caller's write transaction.
func (s *sqliteStore) appendEventsTx(ctx context.Context, tx *sql.Tx, runID string, events []preparedEvent, pu *pendingUpdates) ([]Event, Run, error) {
	now := storedTime(s.now())
	p := planAppend(events)
	return s.appendTx(ctx, tx, sqliteAppend, sqliteAppendArgs(runID, now, p), now, p, pu)
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
		_, out, err = s.appendEventsTx(ctx, tx, r.ID, firsts, &p)
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
	ev, r, _, err := s.PostMessageOnce(ctx, runID, e, "")
	return ev, r, err
}

func (s *sqliteStore) PostMessageOnce(ctx context.Context, runID string, e NewEvent, key string) (Event, Run, bool, error) {
	events, err := prepareEvents([]NewEvent{e})
	if err != nil {
		return Event{}, Run{}, false, err
	}
	now := storedTime(s.now())
	plan := planAppend(events)
	var ev Event
	var out Run
	var p pendingUpdates
	created := false
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if key != "" {
			// The transaction excludes every other writer: the key is
			// either stored already or stored by this post.
			var seq int64
			err := tx.QueryRowContext(ctx, sqliteMessageKey, runID, key).Scan(&seq)
			if err == nil {
				if out, err = lockedRun(ctx, tx, runID); err != nil {
					return err
				}
				var payload, createdAt string
				err = tx.QueryRowContext(ctx, sqliteEventAt, runID, seq).Scan(&ev.RunID, &ev.Seq, &ev.Type, &payload, &createdAt)
				if err != nil {
					return err
				}
				ev.Payload = []byte(payload)
				ev.CreatedAt, err = parseSQLiteTime(createdAt)
				return err
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		appended, r, err := s.appendTx(ctx, tx, sqlitePostMessage, sqliteAppendArgs(runID, now, plan), now, plan, &p)
		if errors.Is(err, sql.ErrNoRows) {
			// Missing, deleted or closed: which one?
			r, err := lockedRun(ctx, tx, runID)
			if err == nil {
				err = cmp.Or(closedError(r), ErrConflict)
			}
			return err
		}
		if err != nil {
			return err
		}
		ev, out, created = appended[0], r, true
		if key != "" {
			_, err = tx.ExecContext(ctx, sqliteInsertMessageKey, runID, key, ev.Seq, sqliteTime(now))
		}
		return err
	})
	if err != nil {
		return Event{}, Run{}, false, sqliteError(err)
	}
	if created {
		s.publish(&p)
		s.wakes.wake()
	}
	return ev, out, created, nil
}

func (s *sqliteStore) NextClaimAt(ctx context.Context) (time.Time, error) {
	var lease, queued sql.NullString
	if err := s.read.QueryRowContext(ctx, sqliteNextClaim).Scan(&lease, &queued); err != nil {
		return time.Time{}, sqliteError(err)
	}
	var tp sqliteTimeParser
	at := earliest(tp.parseNull(lease), tp.parseNull(queued))
	return at, tp.err
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

func (s *sqliteStore) AppendLeased(ctx context.Context, l Lease, events ...NewEvent) ([]Event, error) {
	if err := checkLease(l); err != nil {
		return nil, err
	}
	prepared, err := prepareEvents(events)
	if err != nil {
		return nil, err
	}
	out, _, err := s.appendLeased(ctx, l, prepared, nil)
	return out, err
}

func (s *sqliteStore) ReleaseRun(ctx context.Context, l Lease, to RunStatus) (Run, error) {
	_, out, err := s.EndLease(ctx, l, Release{Status: to})
	return out, err
}

func (s *sqliteStore) EndLease(ctx context.Context, l Lease, rel Release, events ...NewEvent) ([]Event, Run, error) {
	rel, err := checkRelease(rel)
	if err != nil {
		return nil, Run{}, err
	}
	if err := checkLease(l); err != nil {
		return nil, Run{}, err
	}
	var prepared []preparedEvent
	if len(events) > 0 {
		if prepared, err = prepareEvents(events); err != nil {
			return nil, Run{}, err
		}
	}
	return s.appendLeased(ctx, l, prepared, &rel)
}

// appendLeased appends events under the lease l, in one transaction, and,
// with rel, ends the lease.
func (s *sqliteStore) appendLeased(ctx context.Context, l Lease, events []preparedEvent, rel *Release) ([]Event, Run, error) {
	now := storedTime(s.now())
	plan := planAppend(events)
	var release, requeue bool
	var notBefore any
	to := RunInProgress
	if rel != nil {
		release, requeue, to = true, rel.Requeue, rel.Status
		if rel.Retry > 0 {
			notBefore = sqliteTime(now.Add(rel.Retry))
		}
	}
	args := append(sqliteAppendArgs(l.RunID, now, plan), l.Owner, l.Token, release, string(to), requeue, notBefore)
	var out []Event
	var r Run
	var p pendingUpdates
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, r, err = s.appendTx(ctx, tx, sqliteAppendLeased, args, now, plan, &p)
		if errors.Is(err, sql.ErrNoRows) {
			return s.missingOrConflictTx(ctx, tx, l.RunID)
		}
		return err
	})
	if err != nil {
		return nil, Run{}, sqliteError(err)
	}
	if release {
		p.add(Notification{Kind: NotifyRun, RunID: r.ID, Owner: r.Owner})
	}
	s.publish(&p)
	if release && !r.QueuedAt.IsZero() && r.Status == RunInProgress {
		s.wakes.wake()
	}
	return out, r, nil
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
func (s *sqliteStore) closeRunTx(ctx context.Context, tx *sql.Tx, r Run, to RunStatus, deleted bool, turnEnd TurnEndFunc, p *pendingUpdates) (Run, error) {
	if r.TurnSeq != 0 {
		end, err := prepareEvents([]NewEvent{{Type: EventTurnEnd, Payload: turnEndPayload(turnEnd, r), EndsTurn: true}})
		if err != nil {
			return Run{}, err
		}
		if _, _, err := s.appendEventsTx(ctx, tx, r.ID, end, p); err != nil {
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

func (s *sqliteStore) CloseRun(ctx context.Context, runID string, to RunStatus, turnEnd TurnEndFunc) (Run, error) {
	if !to.Terminal() {
		return Run{}, invalid(fmt.Errorf("run status %q is not terminal", to))
	}
	var out Run
	var p pendingUpdates
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		r, err := lockedRun(ctx, tx, runID)
		if err == nil {
			err = closedError(r)
		}
		if err != nil {
			return err
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

func (s *sqliteStore) DeleteRun(ctx context.Context, runID string, turnEnd TurnEndFunc) error {
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
