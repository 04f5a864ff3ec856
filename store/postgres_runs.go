package store

import (
	"cmp"
	"context"
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

	// pgClaimRuns leases runs and tells live-update subscribers, in one
	// statement.
	pgClaimRuns = `
WITH claimed AS (
	UPDATE runs SET lease_owner = $1, lease_expires_at = $2, fencing_token = fencing_token + 1,
		queued_at = NULL, not_before = NULL
	WHERE id IN (
		SELECT id FROM runs
		WHERE status = 'InProgress' AND deleted_at IS NULL
		  AND ((queued_at IS NOT NULL AND lease_owner IS NULL AND (not_before IS NULL OR not_before <= $3))
		    OR lease_expires_at < $3)
		ORDER BY coalesce(queued_at, lease_expires_at)
		LIMIT $4
		FOR UPDATE SKIP LOCKED)
	RETURNING *),
sent AS (
	SELECT ` + pgNotifyRunOf + ` FROM claimed)
SELECT ` + runColumns + ` FROM claimed CROSS JOIN (SELECT count(*) FROM sent) AS sent`

	pgRenewLease = `
UPDATE runs SET lease_expires_at = $4
WHERE id = $1 AND lease_owner = $2 AND fencing_token = $3
RETURNING lease_expires_at`

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
  AND NOT ` + pgUnanswered + `
RETURNING ` + runColumns

	pgRunsToResume = `
SELECT ` + runColumns + ` FROM runs
WHERE deleted_at IS NULL AND (
	(status = 'AwaitingApproval'
	  AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.id AND a.status = 'pending'))
	OR (status = 'InProgress' AND lease_owner IS NULL AND queued_at IS NULL
	  AND (turn_seq <> 0 OR ` + pgUnanswered + `)))
ORDER BY updated_at
LIMIT $1`

	// pgUnanswered: the run row has a user message after its HandledSeq.
	pgUnanswered = `EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = runs.id
	AND e.type LIKE 'message.%' AND e.type = 'message.user' AND e.seq > runs.handled_seq)`

	// pgNextClaim finds the earliest lease expiry of an InProgress run,
	// and the earliest time a queued, unleased one may be claimed.
	pgNextClaim = `
SELECT
	(SELECT min(lease_expires_at) FROM runs
	 WHERE lease_expires_at IS NOT NULL AND status = 'InProgress' AND deleted_at IS NULL),
	(SELECT min(coalesce(not_before, queued_at)) FROM runs
	 WHERE queued_at IS NOT NULL AND lease_owner IS NULL AND status = 'InProgress' AND deleted_at IS NULL)`

	pgMessageByKey = `
SELECT ` + eventColumns + ` FROM run_events
WHERE run_id = $1 AND seq = (SELECT seq FROM run_message_keys WHERE run_id = $1 AND idempotency_key = $2)`

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

	// pgTurnAfter and pgHandledAfter are the run's open turn and handled
	// message once pgAdvance has run, as expressions of the row before.
	pgTurnAfter    = `CASE WHEN $6::bigint < 0 THEN turn_seq ELSE $6::bigint END`
	pgHandledAfter = `CASE $7::integer WHEN 1 THEN turn_seq WHEN 2 THEN $8::bigint ELSE handled_seq END`

	// pgAdvance is the SET list that advances a run for a batch of $3
	// events, $4 of them messages; $5 to $8 are the rest of its appendPlan.
	pgAdvance = `last_seq = last_seq + $3::integer,
	last_activity_at = CASE WHEN $3::integer > 0 THEN $2::timestamptz ELSE last_activity_at END,
	message_count = message_count + $4::integer,
	preview = CASE WHEN $5::text = '' THEN preview ELSE $5::text END,
	turn_seq = ` + pgTurnAfter + `,
	handled_seq = ` + pgHandledAfter

	// pgInsertBatch follows a CTE adv, the advanced run row: it inserts
	// the events whose types and payloads are the arrays $9 and $10 at the
	// sequences adv advanced over, and notifies each.
	pgInsertBatch = `,
ev AS (
	SELECT adv.id, adv.owner, adv.last_seq - $3::integer + e.i AS seq, e.type, e.payload
	FROM adv CROSS JOIN unnest($9::text[], $10::text[]) WITH ORDINALITY AS e(type, payload, i)),
ins AS (
	INSERT INTO run_events (` + eventColumns + `)
	SELECT id, seq, type, payload::jsonb, $2::timestamptz FROM ev),
sent AS (
	SELECT pg_notify(` + pgUpdatesChannel + `,
		json_build_object('k', 'event', 'r', id, 'o', owner, 's', seq)::text) FROM ev)`

	// pgNotifyRunOf notifies a change of the run row in scope.
	pgNotifyRunOf = `pg_notify(` + pgUpdatesChannel + `, json_build_object('k', 'run', 'r', id, 'o', owner)::text)`

	// pgAppend appends a batch of events to a run whose row lock the
	// transaction holds, in one statement.
	pgAppend = `
WITH adv AS (
	UPDATE runs SET ` + pgAdvance + `, updated_at = $2::timestamptz
	WHERE id = $1
	RETURNING *)` + pgInsertBatch + `
SELECT ` + runColumns + ` FROM adv CROSS JOIN (SELECT count(*) FROM sent) AS sent`

	// pgPostMessage appends a user message to a run that is neither
	// deleted nor terminal and queues it for a turn (waking it when Idle),
	// and records its idempotency key $11 (unless empty), in one
	// statement. Concurrent posts with one key each pass the key check;
	// the key's primary key refuses all but the first.
	pgPostMessage = `
WITH adv AS (
	UPDATE runs SET ` + pgAdvance + `, updated_at = $2::timestamptz,
		status = CASE WHEN status = 'Idle' THEN 'InProgress' ELSE status END,
		queued_at = coalesce(queued_at, $2::timestamptz)
	WHERE id = $1 AND deleted_at IS NULL AND status NOT IN ('Completed', 'Failed', 'Cancelled')
	  AND NOT EXISTS (SELECT 1 FROM run_message_keys WHERE run_id = $1 AND idempotency_key = $11::text)
	RETURNING *)` + pgInsertBatch + `,
keyed AS (
	INSERT INTO run_message_keys (run_id, idempotency_key, seq, created_at)
	SELECT id, $11::text, last_seq, $2::timestamptz FROM adv WHERE $11::text <> ''),
queued AS (
	SELECT pg_notify('usher_queue.' || current_schema(), id) FROM adv)
SELECT ` + runColumns + ` FROM adv
	CROSS JOIN (SELECT count(*) FROM sent) AS sent CROSS JOIN (SELECT count(*) FROM queued) AS queued`

	// pgAppendLeased is every write of a lease's holder, in one statement
	// fenced by the lease ($11 owner, $12 fencing token): it appends a
	// batch of events (possibly none) and, with $13, ends the lease,
	// moving the run to the status $14 and, with $15 or when the run is
	// left InProgress with work (an open turn, or a user message after the
	// one it handled), queueing it. $16, when not NULL, is the retry's
	// not-before time, which counts a failure; a release without resets
	// the count.
	pgAppendLeased = `
WITH adv AS (
	UPDATE runs SET ` + pgAdvance + `,
		updated_at = CASE WHEN $3::integer > 0 OR ($13::boolean AND status <> $14::text)
			THEN $2::timestamptz ELSE updated_at END,
		lease_owner = CASE WHEN $13::boolean THEN NULL ELSE lease_owner END,
		lease_expires_at = CASE WHEN $13::boolean THEN NULL ELSE lease_expires_at END,
		status = CASE WHEN $13::boolean THEN $14::text ELSE status END,
		queued_at = CASE WHEN $15::boolean OR ($13::boolean AND $14::text = 'InProgress'
				AND (` + pgTurnAfter + ` <> 0 OR EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = runs.id
					AND e.type LIKE 'message.%' AND e.type = 'message.user' AND e.seq > ` + pgHandledAfter + `)))
			THEN coalesce(queued_at, $2::timestamptz) ELSE queued_at END,
		failures = CASE WHEN NOT $13::boolean THEN failures WHEN $16::timestamptz IS NULL THEN 0 ELSE failures + 1 END,
		not_before = CASE WHEN $13::boolean THEN $16::timestamptz ELSE not_before END
	WHERE id = $1 AND lease_owner = $11::text AND fencing_token = $12::bigint
	RETURNING *)` + pgInsertBatch + `,
released AS (
	SELECT ` + pgNotifyRunOf + ` FROM adv WHERE $13::boolean),
queued AS (
	SELECT pg_notify('usher_queue.' || current_schema(), id) FROM adv
	WHERE $13::boolean AND queued_at IS NOT NULL AND status = 'InProgress')
SELECT ` + runColumns + ` FROM adv
	CROSS JOIN (SELECT count(*) FROM sent) AS sent
	CROSS JOIN (SELECT count(*) FROM released) AS released
	CROSS JOIN (SELECT count(*) FROM queued) AS queued`
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

// appendArgs are the arguments $1 to $10 of pgAppend, pgPostMessage and
// pgAppendLeased.
func appendArgs(runID string, now time.Time, p appendPlan) []any {
	return []any{runID, now, len(p.events), p.messages, p.preview, p.turn, p.handled, p.handledSeq, p.types(), p.payloads()}
}

// appendTx appends events to a run whose row lock the transaction holds.
func (s *postgresStore) appendTx(ctx context.Context, tx pgx.Tx, runID string, events []preparedEvent) ([]Event, Run, error) {
	now := storedTime(s.now())
	p := planAppend(events)
	r, err := scanPostgresRun(tx.QueryRow(ctx, pgAppend, appendArgs(runID, now, p)...))
	if err != nil {
		return nil, Run{}, err
	}
	return p.appended(runID, r.LastSeq, now), r, nil
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
		if _, out, err = s.appendTx(ctx, tx, r.ID, firsts); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, pgNotifyQueued, r.ID)
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
	ev, r, _, err := s.PostMessageOnce(ctx, runID, e, "")
	return ev, r, err
}

func (s *postgresStore) PostMessageOnce(ctx context.Context, runID string, e NewEvent, key string) (Event, Run, bool, error) {
	events, err := prepareEvents([]NewEvent{e})
	if err != nil {
		return Event{}, Run{}, false, err
	}
	p := planAppend(events)
	// A concurrent post with the same key that committed first makes
	// this one fail on the key; the second attempt finds its message.
	for attempt := 0; ; attempt++ {
		now := storedTime(s.now())
		out, err := scanPostgresRun(s.pool.QueryRow(ctx, pgPostMessage, append(appendArgs(runID, now, p), key)...))
		switch {
		case err == nil:
			return p.appended(runID, out.LastSeq, now)[0], out, true, nil
		case errors.Is(err, pgx.ErrNoRows):
			return s.postedOrRefused(ctx, runID, key)
		}
		if err = pgError(err); key == "" || attempt > 0 || !errors.Is(err, ErrConflict) {
			return Event{}, Run{}, false, err
		}
	}
}

// postedOrRefused explains why a post wrote nothing: its key names a
// message already stored (returned), or the run is missing, deleted or
// closed.
func (s *postgresStore) postedOrRefused(ctx context.Context, runID, key string) (Event, Run, bool, error) {
	r, err := s.GetRun(ctx, runID)
	if err != nil {
		return Event{}, Run{}, false, err
	}
	if key != "" {
		rows, err := s.pool.Query(ctx, pgMessageByKey, runID, key)
		if err != nil {
			return Event{}, Run{}, false, pgError(err)
		}
		found, err := pgx.CollectRows(rows, scanPostgresEvent)
		if err != nil {
			return Event{}, Run{}, false, pgError(err)
		}
		if len(found) == 1 {
			return found[0], r, false, nil
		}
	}
	return Event{}, Run{}, false, cmp.Or(closedError(r), ErrConflict)
}

func (s *postgresStore) NextClaimAt(ctx context.Context) (time.Time, error) {
	var lease, queued *time.Time
	if err := s.pool.QueryRow(ctx, pgNextClaim).Scan(&lease, &queued); err != nil {
		return time.Time{}, pgError(err)
	}
	return earliest(pgTimeOrZero(lease), pgTimeOrZero(queued)), nil
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
	return collectPostgresRuns(rows)
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

func (s *postgresStore) AppendLeased(ctx context.Context, l Lease, events ...NewEvent) ([]Event, error) {
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

func (s *postgresStore) ReleaseRun(ctx context.Context, l Lease, to RunStatus) (Run, error) {
	_, out, err := s.EndLease(ctx, l, Release{Status: to})
	return out, err
}

func (s *postgresStore) EndLease(ctx context.Context, l Lease, rel Release, events ...NewEvent) ([]Event, Run, error) {
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

// appendLeased runs pgAppendLeased: it appends events under the lease l
// and, with rel, ends the lease.
func (s *postgresStore) appendLeased(ctx context.Context, l Lease, events []preparedEvent, rel *Release) ([]Event, Run, error) {
	now := storedTime(s.now())
	p := planAppend(events)
	var release, requeue bool
	var notBefore *time.Time
	to := RunInProgress
	if rel != nil {
		release, requeue, to = true, rel.Requeue, rel.Status
		if rel.Retry > 0 {
			notBefore = pgNullTime(now.Add(rel.Retry))
		}
	}
	args := append(appendArgs(l.RunID, now, p), l.Owner, l.Token, release, string(to), requeue, notBefore)
	out, err := scanPostgresRun(s.pool.QueryRow(ctx, pgAppendLeased, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, Run{}, s.missingOrConflict(ctx, l.RunID)
	}
	if err != nil {
		return nil, Run{}, pgError(err)
	}
	return p.appended(l.RunID, out.LastSeq, now), out, nil
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
func (s *postgresStore) closeRunTx(ctx context.Context, tx pgx.Tx, r Run, to RunStatus, deleted bool, turnEnd TurnEndFunc) (Run, error) {
	if r.TurnSeq != 0 {
		end, err := prepareEvents([]NewEvent{{Type: EventTurnEnd, Payload: turnEndPayload(turnEnd, r), EndsTurn: true}})
		if err != nil {
			return Run{}, err
		}
		if _, _, err := s.appendTx(ctx, tx, r.ID, end); err != nil {
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

func (s *postgresStore) CloseRun(ctx context.Context, runID string, to RunStatus, turnEnd TurnEndFunc) (Run, error) {
	if !to.Terminal() {
		return Run{}, invalid(fmt.Errorf("run status %q is not terminal", to))
	}
	var out Run
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := scanPostgresRun(tx.QueryRow(ctx, pgLockRun, runID))
		if err == nil {
			err = closedError(r)
		}
		if err != nil {
			return err
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

func (s *postgresStore) DeleteRun(ctx context.Context, runID string, turnEnd TurnEndFunc) error {
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
