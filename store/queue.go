package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The assistant runtime's queue, written once for both engines. The runs
// table is the queue: a claim is one UPDATE over rows picked FOR UPDATE
// SKIP LOCKED (on SQLite the write transaction's lock excludes every other
// claimer), and every write of a lease's holder is conditioned on the
// fencing token its claim set, in the statement's WHERE clause.
//
// A write that appends events advances the run's row (its sequence, its
// summary, its turn) and inserts the events at the sequences it advanced
// over, while it holds the row's lock: concurrent appends queue behind each
// other and leave no gap. PostgreSQL does both in one statement, the INSERT
// a data-modifying CTE over the UPDATE (see advancing), so that each write
// of a turn is one statement, without a transaction of its own (writeOne);
// SQLite, whose CTEs cannot modify, runs the UPDATE and then insertBatch
// in its write transaction.

// The parameters of a statement built with advancing: $1 the run, $2 the
// time, $3 the number of events, $4 of them messages, $5 to $8 the rest of
// the appendPlan (preview, turn, handled, handledSeq), $9 the batch (see
// appendPlan.batch). A statement's own parameters follow from $10.
const (
	// runTurnAfter and runHandledAfter are the run's open turn and handled
	// message once runAdvance has run, as expressions of the row before.
	runTurnAfter    = `CASE WHEN $6::bigint < 0 THEN turn_seq ELSE $6::bigint END`
	runHandledAfter = `CASE $7::integer WHEN 1 THEN turn_seq WHEN 2 THEN $8::bigint ELSE handled_seq END`

	// runAdvance is the SET list that advances a run for the batch.
	runAdvance = `last_seq = last_seq + $3::integer,
	last_activity_at = CASE WHEN $3::integer > 0 THEN $2::timestamptz ELSE last_activity_at END,
	message_count = message_count + $4::integer,
	preview = CASE WHEN $5::text = '' THEN preview ELSE $5::text END,
	turn_seq = ` + runTurnAfter + `,
	handled_seq = ` + runHandledAfter

	// runUnanswered: the run row has a user message after its HandledSeq.
	// (The LIKE lets the planner use the messages' partial index.)
	runUnanswered = `EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = runs.id
	AND e.type LIKE 'message.%' AND e.type = 'message.user' AND e.seq > runs.handled_seq)`
)

// advancing builds the statement of a write that advances a run's row for
// a batch of events: update is an UPDATE of runs, without RETURNING, over
// the parameters above; with holds further data-modifying CTEs over the
// advanced row adv, which PostgreSQL runs in the same statement (on SQLite
// the caller runs their equivalents, sqliteFollowUp statements, after it).
// notes are SELECT CTEs over adv that send, on PostgreSQL, the
// notifications of the write beyond its events' (which every such
// statement sends): the statement sends them itself (see
// executor.notifyAfter), and the caller still queues them, for SQLite. The
// statement returns the run as it is after the write, or no row when
// update's condition held none.
func advancing(update string, with []string, notes ...string) stmt {
	pg := `
WITH adv AS (` + update + `
	RETURNING *),
ev AS (
	SELECT adv.id, adv.owner, adv.last_seq - $3::integer + e.i AS seq, e.v ->> 0 AS type, (e.v ->> 1)::jsonb AS payload,
		adv.active_branch AS branch
	FROM adv CROSS JOIN json_array_elements($9::json) WITH ORDINALITY AS e(v, i)),
ins AS (
	INSERT INTO run_events (` + eventColumns + `)
	SELECT id, seq, type, payload, $2::timestamptz, branch FROM ev)`
	for _, w := range with {
		pg += `,
` + w
	}
	notes = append([]string{`SELECT ` + pgNotifyUpdate(`json_build_object('k', 'event', 'r', id, 'o', owner, 's', seq)`) + ` FROM ev`}, notes...)
	pg += pgSending(notes) + `
SELECT ` + runColumns + ` FROM adv` + pgSent(len(notes))
	s := perEngine(pg, update+`
RETURNING `+runColumns)
	s.pgNotifies = true
	return s
}

// pgNotifyUpdate is the pg_notify call sending the JSON object obj (a
// Notification) on the schema's updates channel; pgNotifyQueue wakes the
// schedulers listening on its queue channel.
func pgNotifyUpdate(obj string) string {
	return `pg_notify('usher_updates.' || current_schema(), ` + obj + `::text)`
}

const pgNotifyQueue = `pg_notify('usher_queue.' || current_schema(), '')`

// pgSending and pgSent write the notifying CTEs of a statement: sent1,
// sent2 ... for the SELECTs notes, and the joins that make the final
// SELECT run them (PostgreSQL runs a SELECT in WITH only as far as it is
// read). Each join adds one row, so the statement returns what it did.
func pgSending(notes []string) string {
	var b strings.Builder
	for i, n := range notes {
		fmt.Fprintf(&b, ",\nsent%d AS (%s)", i+1, n)
	}
	return b.String()
}

func pgSent(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "\n\tCROSS JOIN (SELECT count(*) FROM sent%d) AS sent%d", i+1, i+1)
	}
	return b.String()
}

// sqliteFollowUp names a statement that only SQLite runs, after a
// statement built with advancing: PostgreSQL did the same in that
// statement's CTEs. Executing it on PostgreSQL does nothing.
func sqliteFollowUp(q string) stmt { return stmt{lite: sqliteDialect(q)} }

var (
	// appendRun appends a batch to a run whose row the transaction has
	// locked, or is about to.
	appendRun = advancing(`UPDATE runs SET `+runAdvance+`, updated_at = $2::timestamptz
	WHERE id = $1`, nil)

	// postMessage appends a user message to a run that is neither deleted
	// nor terminal and queues it for a turn (waking it when Idle), unless
	// the run holds a message posted with the idempotency key $10; it
	// records the key (unless empty) and the post's trace context ($11
	// traceparent, $12 tracestate). Concurrent posts with one key on
	// PostgreSQL each pass the key check; the key's primary key refuses
	// all but the first.
	postMessage = advancing(`UPDATE runs SET `+runAdvance+`, updated_at = $2::timestamptz,
		status = CASE WHEN status = 'Idle' THEN 'InProgress' ELSE status END,
		queued_at = coalesce(queued_at, $2::timestamptz),
		queued_traceparent = $11::text, queued_tracestate = $12::text
	WHERE id = $1 AND deleted_at IS NULL AND status NOT IN ('Completed', 'Failed', 'Cancelled')
	  AND NOT EXISTS (SELECT 1 FROM run_message_keys WHERE run_id = $1 AND idempotency_key = $10::text)`,
		[]string{`keyed AS (
	INSERT INTO run_message_keys (run_id, idempotency_key, seq, created_at)
	SELECT id, $10::text, last_seq, $2::timestamptz FROM adv WHERE $10::text <> '')`},
		`SELECT `+pgNotifyQueue+` FROM adv`)

	// appendLeased is every write of a lease's holder, fenced by the lease
	// ($10 owner, $11 fencing token): it appends a batch (possibly empty)
	// and, with $12, ends the lease, moving the run to the status $13 and,
	// with $14 or when the run is left InProgress with work (an open turn,
	// or a user message after the one it handled), queueing it. $15, when
	// not NULL, is the retry's not-before time, which counts a failure; a
	// release without resets the count. $16 to $19, when $16 is not NULL,
	// are the run's new context accounting (RunContext: tokens, limit,
	// source, seq), recorded at $2.
	appendLeased = advancing(`UPDATE runs SET `+runAdvance+`,
		updated_at = CASE WHEN $3::integer > 0 OR ($12::boolean AND status <> $13::text)
			THEN $2::timestamptz ELSE updated_at END,
		lease_owner = CASE WHEN $12::boolean THEN NULL ELSE lease_owner END,
		lease_expires_at = CASE WHEN $12::boolean THEN NULL ELSE lease_expires_at END,
		status = CASE WHEN $12::boolean THEN $13::text ELSE status END,
		queued_at = CASE WHEN $14::boolean OR ($12::boolean AND $13::text = 'InProgress'
				AND (`+runTurnAfter+` <> 0 OR EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = runs.id
					AND e.type LIKE 'message.%' AND e.type = 'message.user' AND e.seq > `+runHandledAfter+`)))
			THEN coalesce(queued_at, $2::timestamptz) ELSE queued_at END,
		failures = CASE WHEN NOT $12::boolean THEN failures WHEN $15::timestamptz IS NULL THEN 0 ELSE failures + 1 END,
		not_before = CASE WHEN $12::boolean THEN $15::timestamptz ELSE not_before END,
		context_tokens = coalesce($16::bigint, context_tokens),
		context_limit = CASE WHEN $16::bigint IS NULL THEN context_limit ELSE $17::bigint END,
		context_source = CASE WHEN $16::bigint IS NULL THEN context_source ELSE $18::text END,
		context_seq = CASE WHEN $16::bigint IS NULL THEN context_seq ELSE $19::bigint END,
		context_at = CASE WHEN $16::bigint IS NULL THEN context_at ELSE $2::timestamptz END
	WHERE id = $1 AND lease_owner = $10::text AND fencing_token = $11::bigint`, nil,
		`SELECT `+pgNotifyUpdate(`json_build_object('k', 'run', 'r', id, 'o', owner)`)+` FROM adv WHERE $12::boolean`,
		`SELECT `+pgNotifyQueue+` FROM adv WHERE $12::boolean AND queued_at IS NOT NULL AND status = 'InProgress'`)

	// insertBatch inserts on SQLite the batch $4 of events of the run $1
	// from the sequence $2 on, at $3, on the branch $5.
	insertBatch = sqliteFollowUp(`
INSERT INTO run_events (` + eventColumns + `)
SELECT $1, $2 + e.key, e.value ->> 0, e.value ->> 1, $3, $5 FROM json_each($4) AS e`)

	// insertMessageKey records on SQLite the idempotency key $2 of the
	// message $3 of the run $1, at $4.
	insertMessageKey = sqliteFollowUp(`
INSERT INTO run_message_keys (run_id, idempotency_key, seq, created_at) VALUES ($1, $2, $3, $4)`)

	// lockOwnerRuns serialises the creations of one owner's runs, so that
	// counting the active runs and inserting one is atomic across
	// processes. SQLite's write transaction does that.
	lockOwnerRuns = postgresOnly(`SELECT pg_advisory_xact_lock(hashtextextended('usher.runs.owner.' || $1, 0))`)

	runByIdempotencyKey = sql1(`SELECT ` + runColumns + ` FROM runs WHERE owner = $1 AND idempotency_key = $2`)

	// openRun inserts the run $1 unless its owner $2 has $8 active runs or
	// more (then no row): the count and the insert are one statement,
	// under lockOwnerRuns. $10 and $11 are the trace context of the
	// request that queued its first message.
	openRun = sql1(`
INSERT INTO runs (id, owner, title, status, idempotency_key, queued_at,
	created_at, updated_at, last_activity_at, metadata, queued_traceparent, queued_tracestate)
SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::timestamptz, $7::timestamptz, $7::timestamptz, $7::timestamptz, $9::jsonb,
	$10::text, $11::text
WHERE (SELECT count(*) FROM runs
	WHERE owner = $2::text AND status IN ('InProgress', 'AwaitingApproval') AND deleted_at IS NULL) < $8::bigint
RETURNING ` + runColumns)

	// lockRun reads a run and takes its row lock, for a write that
	// depends on its state.
	lockRun = sql1(`SELECT ` + runColumns + ` FROM runs WHERE id = $1 FOR UPDATE`)

	// liveRunExists: the run exists and is not deleted.
	liveRunExists = sql1(`SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1 AND deleted_at IS NULL)`)

	messageByKey = sql1(`
SELECT ` + eventColumns + ` FROM run_events
WHERE run_id = $1 AND seq = (SELECT seq FROM run_message_keys WHERE run_id = $1 AND idempotency_key = $2)`)

	// claimRuns leases runs, in one statement: the subquery locks the
	// claimable rows that no concurrent claim holds, and skips the others.
	// On PostgreSQL the statement sends the claimed runs' notifications.
	claimRuns = func() stmt {
		claim := `
UPDATE runs SET lease_owner = $1, lease_expires_at = $2, fencing_token = fencing_token + 1,
	queued_at = NULL, not_before = NULL
WHERE id IN (
	SELECT id FROM runs
	WHERE status = 'InProgress' AND deleted_at IS NULL
	  AND ((queued_at IS NOT NULL AND lease_owner IS NULL AND (not_before IS NULL OR not_before <= $3))
	    OR lease_expires_at < $3)
	ORDER BY coalesce(queued_at, lease_expires_at)
	LIMIT $4
	FOR UPDATE SKIP LOCKED)`
		s := perEngine(`
WITH claimed AS (`+claim+`
	RETURNING *)`+
			pgSending([]string{`SELECT ` + pgNotifyUpdate(`json_build_object('k', 'run', 'r', id, 'o', owner)`) + ` FROM claimed`})+`
SELECT `+runColumns+` FROM claimed`+pgSent(1),
			claim+`
RETURNING `+runColumns)
		s.pgNotifies = true
		return s
	}()

	// nextClaim finds the earliest lease expiry of an InProgress run, and
	// the earliest time a queued, unleased one may be claimed.
	nextClaim = sql1(`
SELECT
	(SELECT min(lease_expires_at) FROM runs
	 WHERE lease_expires_at IS NOT NULL AND status = 'InProgress' AND deleted_at IS NULL),
	(SELECT min(coalesce(not_before, queued_at)) FROM runs
	 WHERE queued_at IS NOT NULL AND lease_owner IS NULL AND status = 'InProgress' AND deleted_at IS NULL)`)

	leaseOwners = sql1(`SELECT DISTINCT lease_owner FROM runs WHERE lease_owner IS NOT NULL ORDER BY lease_owner`)

	// wakeRetries makes the runs queued for a retry after $1 claimable.
	wakeRetries = sql1(`
UPDATE runs SET not_before = NULL
WHERE queued_at IS NOT NULL AND lease_owner IS NULL AND not_before > $1 AND status = 'InProgress' AND deleted_at IS NULL`)

	// requeueLeases ends the leases of the owner $1 at $2, queueing their
	// runs for a claim now.
	requeueLeases = sql1(`
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, fencing_token = fencing_token + 1,
	queued_at = coalesce(queued_at, $2), not_before = NULL
WHERE lease_owner = $1
RETURNING ` + runColumns)

	renewLease = sql1(`
UPDATE runs SET lease_expires_at = $4
WHERE id = $1 AND lease_owner = $2 AND fencing_token = $3
RETURNING lease_expires_at`)

	requeueRun = sql1(`
UPDATE runs SET status = 'InProgress', queued_at = coalesce(queued_at, $2),
	updated_at = CASE WHEN status = 'InProgress' THEN updated_at ELSE $2 END
WHERE id = $1 AND status IN ('InProgress', 'AwaitingApproval') AND deleted_at IS NULL
RETURNING ` + runColumns)

	// closeRun ends the run with the status $2 at $3, deleting it at $4
	// unless NULL, and revokes its lease.
	closeRun = sql1(`
UPDATE runs SET status = $2, completed_at = $3, updated_at = $3, deleted_at = $4,
	lease_owner = NULL, lease_expires_at = NULL, queued_at = NULL, fencing_token = fencing_token + 1
WHERE id = $1
RETURNING ` + runColumns)

	deleteClosedRun = sql1(`UPDATE runs SET deleted_at = $2 WHERE id = $1`)

	parkIdleRuns = sql1(`
UPDATE runs SET status = 'Idle', updated_at = $2
WHERE status = 'InProgress' AND deleted_at IS NULL AND lease_owner IS NULL
  AND queued_at IS NULL AND turn_seq = 0 AND last_activity_at < $1
  AND NOT ` + runUnanswered + `
RETURNING ` + runColumns)

	runsToResume = sql1(`
SELECT ` + runColumns + ` FROM runs
WHERE deleted_at IS NULL AND (
	(status = 'AwaitingApproval'
	  AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.id AND a.status = 'pending'))
	OR (status = 'InProgress' AND lease_owner IS NULL AND queued_at IS NULL
	  AND (turn_seq <> 0 OR ` + runUnanswered + `)))
ORDER BY updated_at
LIMIT $1`)

	// messageWindows[line][last] read a window of the run's messages,
	// the first of them or (last = 1) the last, of a line: the active
	// branch's (messagesOfActive), the original line's
	// (messagesOfOriginal), or the line of the branch $5
	// (messagesOfBranch); see ListMessages.
	messageWindows = func() (out [3][2]stmt) {
		for line, on := range [3]string{
			messagesOfActive:   onLine("e", "seq", branchOr(`$5::bigint`, `$1`)),
			messagesOfOriginal: `e.branch = 0 AND $5::bigint = 0`,
			messagesOfBranch:   onLine("e", "seq", `$5::bigint`),
		} {
			for last, order := range [2]string{"", " DESC"} {
				out[line][last] = sql1(`
SELECT ` + eventColumns + ` FROM run_events e
WHERE run_id = $1 AND type LIKE 'message.%' AND seq > $2 AND seq < $3
  AND ` + on + `
ORDER BY seq` + order + `
LIMIT $4`)
			}
		}
		return out
	}()
)

// The lines of messageWindows.
const (
	messagesOfActive = iota
	messagesOfOriginal
	messagesOfBranch
)

// advanceRun runs w, a statement built with advancing, for the plan p at
// now, with w's own arguments more; on SQLite it then inserts the events.
// It returns the events appended and the run after, and queues the
// events' notifications; sql.ErrNoRows when w's condition held no row.
func advanceRun(ctx context.Context, x executor, w stmt, runID string, now time.Time, p appendPlan, more ...any) ([]Event, Run, error) {
	batch, err := p.batch()
	if err != nil {
		return nil, Run{}, err
	}
	args := append([]any{runID, now, len(p.events), p.messages, p.preview, p.turn, p.handled, p.handledSeq, batch}, more...)
	r, err := scanRun(x.row(ctx, w, args...))
	if err != nil {
		return nil, Run{}, err
	}
	events := p.appended(r, now)
	if len(events) > 0 {
		if _, err := x.exec(ctx, insertBatch, runID, events[0].Seq, now, batch, r.ActiveBranch); err != nil {
			return nil, Run{}, err
		}
	}
	for _, e := range events {
		x.notifyAfter(w, Notification{Kind: NotifyEvent, RunID: runID, Owner: r.Owner, Seq: e.Seq})
	}
	return events, r, nil
}

func (c *core) OpenRun(ctx context.Context, r Run, maxActive int, first *NewEvent) (Run, bool, error) {
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
	var out Run
	var created bool
	err := c.inTx(ctx, func(tx executor) error {
		created = false
		if existing, found, err := lockOwner(ctx, tx, r.Owner, r.IdempotencyKey); err != nil || found {
			out = existing
			return err
		}
		now := storedTime(c.now())
		var queuedAt any
		var trace TraceContext
		if first != nil {
			queuedAt, trace = now, first.Trace
		}
		run, err := scanRun(tx.row(ctx, openRun,
			r.ID, r.Owner, r.Title, string(r.Status), nullString(r.IdempotencyKey), queuedAt, now, maxActive, metadataOf(r),
			nullString(trace.Parent), nullString(trace.State)))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrLimit
		}
		if err != nil {
			return err
		}
		if first != nil {
			if _, run, err = advanceRun(ctx, tx, appendRun, r.ID, now, planAppend(firsts)); err != nil {
				return err
			}
			tx.wake()
		}
		tx.notifyRuns(run)
		out, created = run, true
		return nil
	})
	if err != nil {
		return Run{}, false, c.fail(err)
	}
	return out, created, nil
}

// lockOwner takes owner's lock on creating runs (PostgreSQL; SQLite's one
// writer serialises them anyway) and returns, when key is not empty, the
// run owner created with key (found true): an idempotent creation's retry.
func lockOwner(ctx context.Context, tx executor, owner, key string) (_ Run, found bool, _ error) {
	if _, err := tx.exec(ctx, lockOwnerRuns, owner); err != nil {
		return Run{}, false, err
	}
	if key == "" {
		return Run{}, false, nil
	}
	existing, err := scanRun(tx.row(ctx, runByIdempotencyKey, owner, key))
	switch {
	case err == nil:
		return existing, true, nil
	case errors.Is(err, sql.ErrNoRows):
		return Run{}, false, nil
	}
	return Run{}, false, err
}

func (c *core) PostMessage(ctx context.Context, runID string, e NewEvent) (Event, Run, error) {
	ev, r, _, err := c.PostMessageOnce(ctx, runID, e, "")
	return ev, r, err
}

func (c *core) PostMessageOnce(ctx context.Context, runID string, e NewEvent, key string) (Event, Run, bool, error) {
	events, err := prepareEvents([]NewEvent{e})
	if err != nil {
		return Event{}, Run{}, false, err
	}
	p := planAppend(events)
	// On PostgreSQL a concurrent post with the same key that committed
	// first makes this one fail on the key; the second attempt finds its
	// message.
	for attempt := 0; ; attempt++ {
		var ev Event
		var out Run
		var created bool
		err := c.writeOne(ctx, func(x executor) error {
			now := storedTime(c.now())
			appended, r, err := advanceRun(ctx, x, postMessage, runID, now, p, key, nullString(e.Trace.Parent), nullString(e.Trace.State))
			if errors.Is(err, sql.ErrNoRows) {
				ev, out, err = postedOrRefused(ctx, x, runID, key)
				return err
			}
			if err != nil {
				return err
			}
			if key != "" {
				if _, err := x.exec(ctx, insertMessageKey, runID, key, appended[0].Seq, now); err != nil {
					return err
				}
			}
			x.wakeAfter(postMessage)
			ev, out, created = appended[0], r, true
			return nil
		})
		if err == nil {
			return ev, out, created, nil
		}
		if err = c.fail(err); key == "" || attempt > 0 || !errors.Is(err, ErrConflict) {
			return Event{}, Run{}, false, err
		}
	}
}

// postedOrRefused explains why a post wrote nothing: its key names a
// message already stored (returned), or the run is missing, deleted or
// closed.
func postedOrRefused(ctx context.Context, x executor, runID, key string) (Event, Run, error) {
	r, err := scanRun(x.row(ctx, getRun, runID))
	if err != nil {
		return Event{}, Run{}, err
	}
	if key != "" {
		ev, err := scanEvent(x.row(ctx, messageByKey, runID, key))
		if err == nil {
			return ev, r, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Event{}, Run{}, err
		}
	}
	return Event{}, Run{}, cmp.Or(closedError(r), ErrConflict)
}

var (
	runKeyUsed     = sql1(`SELECT EXISTS (SELECT 1 FROM runs WHERE owner = $1 AND idempotency_key = $2)`)
	messageKeyUsed = sql1(`SELECT EXISTS (SELECT 1 FROM run_message_keys WHERE run_id = $1 AND idempotency_key = $2)`)
)

func (c *core) RunKeyUsed(ctx context.Context, owner, key string) (bool, error) {
	return c.exists(ctx, runKeyUsed, owner, key)
}

func (c *core) MessageKeyUsed(ctx context.Context, runID, key string) (bool, error) {
	return c.exists(ctx, messageKeyUsed, runID, key)
}

// exists answers the query q, a SELECT EXISTS, of args; false for an
// empty argument, which names nothing.
func (c *core) exists(ctx context.Context, q stmt, args ...string) (bool, error) {
	a := make([]any, len(args))
	for i, v := range args {
		if v == "" {
			return false, nil
		}
		a[i] = v
	}
	var found bool
	err := c.reader().row(ctx, q, a...).Scan(&found)
	return found, c.fail(err)
}

func (c *core) NextClaimAt(ctx context.Context) (time.Time, error) {
	var lease, queued time.Time
	if err := c.reader().row(ctx, nextClaim).Scan(at(&lease), at(&queued)); err != nil {
		return time.Time{}, c.fail(err)
	}
	return earliest(lease, queued), nil
}

func (c *core) WakeRetries(ctx context.Context) (int, error) {
	var n int64
	err := c.writeOne(ctx, func(x executor) error {
		var err error
		n, err = x.exec(ctx, wakeRetries, storedTime(c.now()))
		return err
	})
	return int(n), c.fail(err)
}

func (c *core) ClaimRuns(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]Run, error) {
	if owner == "" {
		return nil, invalid(errors.New("claim owner is empty"))
	}
	if err := errors.Join(checkListLimit(limit), checkLeaseFor(leaseFor)); err != nil {
		return nil, err
	}
	var runs []Run
	err := c.writeOne(ctx, func(x executor) error {
		now := storedTime(c.now())
		var err error
		runs, err = queryAll(ctx, x, claimRuns, scanRun, owner, storedTime(now.Add(leaseFor)), now, limit)
		for _, r := range runs {
			x.notifyAfter(claimRuns, runNotification(r))
		}
		return err
	})
	if err != nil {
		return nil, c.fail(err)
	}
	return runs, nil
}

func (c *core) LeaseOwners(ctx context.Context) ([]string, error) {
	out, err := queryAll(ctx, c.reader(), leaseOwners, func(row rowScanner) (string, error) {
		var s string
		return s, row.Scan(&s)
	})
	return out, c.fail(err)
}

func (c *core) RequeueLeases(ctx context.Context, owner string) ([]Run, error) {
	if err := invalid(checkText("lease owner", owner)); err != nil {
		return nil, err
	}
	if owner == "" {
		return nil, invalid(errors.New("lease owner is empty"))
	}
	var runs []Run
	err := c.writeOne(ctx, func(x executor) error {
		var err error
		runs, err = queryAll(ctx, x, requeueLeases, scanRun, owner, storedTime(c.now()))
		if err != nil {
			return err
		}
		x.notifyRuns(runs...)
		if len(runs) > 0 {
			x.wake()
		}
		return nil
	})
	if err != nil {
		return nil, c.fail(err)
	}
	return runs, nil
}

func (c *core) RenewLease(ctx context.Context, l Lease, leaseFor time.Duration) (Lease, error) {
	if err := errors.Join(checkLease(l), checkLeaseFor(leaseFor)); err != nil {
		return Lease{}, err
	}
	err := c.writeOne(ctx, func(x executor) error {
		until := storedTime(c.now().Add(leaseFor))
		err := x.row(ctx, renewLease, l.RunID, l.Owner, l.Token, until).Scan(at(&l.ExpiresAt))
		if errors.Is(err, sql.ErrNoRows) {
			return missingOrConflict(ctx, x, runExists, l.RunID)
		}
		return err
	})
	if err != nil {
		return Lease{}, c.fail(err)
	}
	return l, nil
}

func (c *core) AppendLeased(ctx context.Context, l Lease, events ...NewEvent) ([]Event, error) {
	if err := checkLease(l); err != nil {
		return nil, err
	}
	prepared, err := prepareEvents(events)
	if err != nil {
		return nil, err
	}
	out, _, err := c.appendLeased(ctx, l, prepared, nil, nil)
	return out, err
}

func (c *core) ReleaseRun(ctx context.Context, l Lease, to RunStatus) (Run, error) {
	_, out, err := c.EndLease(ctx, l, Release{Status: to})
	return out, err
}

func (c *core) EndLease(ctx context.Context, l Lease, rel Release, events ...NewEvent) ([]Event, Run, error) {
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
	return c.appendLeased(ctx, l, prepared, &rel, rel.Context)
}

// appendLeased appends events under the lease l and, with rel, ends the
// lease, and, with acct, records the run's context accounting: one
// statement, fenced by the lease, on PostgreSQL.
func (c *core) appendLeased(ctx context.Context, l Lease, events []preparedEvent, rel *Release, acct *RunContext) ([]Event, Run, error) {
	p := planAppend(events)
	var release, requeue bool
	to := RunInProgress
	if rel != nil {
		release, requeue, to = true, rel.Requeue, rel.Status
	}
	var out []Event
	var r Run
	// Ending a step is a second statement: a transaction of its own.
	write := c.writeOne
	if rel != nil && rel.Step != nil {
		write = c.inTx
	}
	err := write(ctx, func(x executor) error {
		now := storedTime(c.now())
		var notBefore any
		if rel != nil && rel.Retry > 0 {
			notBefore = storedTime(now.Add(rel.Retry))
		}
		var tokens, limit, source, seq any
		if acct != nil {
			tokens, limit, source, seq = acct.Tokens, acct.Limit, string(acct.Source), acct.Seq
		}
		var err error
		out, r, err = advanceRun(ctx, x, appendLeased, l.RunID, now, p,
			l.Owner, l.Token, release, string(to), requeue, notBefore, tokens, limit, source, seq)
		if errors.Is(err, sql.ErrNoRows) {
			return missingOrConflict(ctx, x, runExists, l.RunID)
		}
		if err != nil || !release {
			return err
		}
		if rel.Step != nil {
			if r, err = endOpenStep(ctx, x, r, l.Token, *rel.Step, now); err != nil {
				return err
			}
		}
		x.notifyAfter(appendLeased, runNotification(r))
		if !r.QueuedAt.IsZero() && r.Status == RunInProgress {
			x.wakeAfter(appendLeased)
		}
		return nil
	})
	if err != nil {
		return nil, Run{}, c.fail(err)
	}
	return out, r, nil
}

func (c *core) RequeueRun(ctx context.Context, runID string) (Run, error) {
	var out Run
	err := c.writeOne(ctx, func(x executor) error {
		var err error
		out, err = scanRun(x.row(ctx, requeueRun, runID, storedTime(c.now())))
		if errors.Is(err, sql.ErrNoRows) {
			// Missing or deleted, or Idle or terminal.
			return missingOrConflict(ctx, x, liveRunExists, runID)
		}
		if err != nil {
			return err
		}
		x.notifyRuns(out)
		x.wake()
		return nil
	})
	if err != nil {
		return Run{}, c.fail(err)
	}
	return out, nil
}

// endRun ends the run r, whose row lock tx holds, with the terminal status
// to, deleting it when deleted: it first ends the open turn and then the
// turn of every user message still waiting for one, so that each user
// message has its turn's end (with turnEnd nil: the open turn's bare end,
// and nothing for waiting messages). Last, it withdraws the run's open
// approvals as w says: a closed run's calls never run.
func (c *core) endRun(ctx context.Context, tx executor, r Run, to RunStatus, deleted bool, turnEnd TurnEndFunc, w Withdrawal) (Run, error) {
	now := storedTime(c.now())
	if turnEnd == nil {
		if r.TurnSeq != 0 {
			bare := func(int64, bool) []NewEvent { return []NewEvent{{Type: EventTurnEnd, EndsTurn: true}} }
			if _, err := endTurn(ctx, tx, r, r.TurnSeq, true, now, bare); err != nil {
				return Run{}, err
			}
		}
	} else if _, err := endTurns(ctx, tx, r, now, turnEnd); err != nil {
		return Run{}, err
	}
	if _, err := endOpenStep(ctx, tx, r, 0, StepEnd{Outcome: StepClosed}, now); err != nil {
		return Run{}, err
	}
	var deletedAt any
	if deleted {
		deletedAt = now
	}
	out, err := scanRun(tx.row(ctx, closeRun, r.ID, string(to), now, deletedAt))
	if err != nil {
		return Run{}, err
	}
	reason := ReleaseCancelled
	switch {
	case deleted:
		reason = ReleaseDeleted
	case to == RunCompleted:
		reason = ReleaseCompleted
	}
	if err := releaseRunHold(ctx, tx, r.ID, now, reason); err != nil {
		return Run{}, err
	}
	// The audit lock that the withdrawals' records take comes last.
	if err := withdrawApprovals(ctx, tx, r, w, now); err != nil {
		return Run{}, err
	}
	tx.notifyRuns(out)
	return out, nil
}

// endTurns ends the open turn of the run r, whose row lock tx holds, and
// the turn of every user message after it that waits for one, with the
// events of turnEnd, and returns the run as they leave it.
func endTurns(ctx context.Context, tx executor, r Run, now time.Time, turnEnd TurnEndFunc) (Run, error) {
	var err error
	if r.TurnSeq != 0 {
		if r, err = endTurn(ctx, tx, r, r.TurnSeq, true, now, turnEnd); err != nil {
			return Run{}, err
		}
	}
	for {
		var seq int64
		switch err := tx.row(ctx, firstUnanswered, r.ID, r.HandledSeq).Scan(&seq); {
		case errors.Is(err, sql.ErrNoRows):
			return r, nil
		case err != nil:
			return Run{}, err
		}
		if r, err = endTurn(ctx, tx, r, seq, false, now, turnEnd); err != nil {
			return Run{}, err
		}
	}
}

// endTurn appends the events of turnEnd that end the turn of the user
// message seq of the run r (started: the open turn; else one that never
// started), whose row lock tx holds, checking that they do end it, and
// returns the run as they leave it.
func endTurn(ctx context.Context, tx executor, r Run, seq int64, started bool, now time.Time, turnEnd TurnEndFunc) (Run, error) {
	events, err := prepareEvents(turnEnd(seq, started))
	if err != nil {
		return Run{}, err
	}
	p := planAppend(events)
	ends := (started && p.handled == handledFromTurn) || (!started && p.handled == handledSet && p.handledSeq == seq)
	if !ends || p.turn != 0 {
		return Run{}, invalid(fmt.Errorf("the events that end the turn of message %d do not end it", seq))
	}
	_, out, err := advanceRun(ctx, tx, appendRun, r.ID, now, p)
	return out, err
}

func (c *core) CloseRun(ctx context.Context, runID string, to RunStatus, turnEnd TurnEndFunc, w Withdrawal) (Run, error) {
	if !to.Terminal() {
		return Run{}, invalid(fmt.Errorf("run status %q is not terminal", to))
	}
	if err := invalid(checkText("the reason of the withdrawal", w.Reason)); err != nil {
		return Run{}, err
	}
	var out Run
	err := c.inTx(ctx, func(tx executor) error {
		r, err := scanRun(tx.row(ctx, lockRun, runID))
		if err == nil {
			err = closedError(r)
		}
		if err != nil {
			return err
		}
		out, err = c.endRun(ctx, tx, r, to, false, turnEnd, w)
		return err
	})
	if err != nil {
		return Run{}, c.fail(err)
	}
	return out, nil
}

func (c *core) DeleteRun(ctx context.Context, runID string, turnEnd TurnEndFunc, w Withdrawal) error {
	if err := invalid(checkText("the reason of the withdrawal", w.Reason)); err != nil {
		return c.fail(err)
	}
	return c.fail(c.inTx(ctx, func(tx executor) error {
		r, err := scanRun(tx.row(ctx, lockRun, runID))
		switch {
		case err != nil:
			return err
		case !r.DeletedAt.IsZero():
			return ErrNotFound
		}
		return c.deleteLocked(ctx, tx, r, turnEnd, w)
	}))
}

// deleteLocked deletes the run r, not deleted, whose row lock tx holds,
// as DeleteRun describes.
func (c *core) deleteLocked(ctx context.Context, tx executor, r Run, turnEnd TurnEndFunc, w Withdrawal) error {
	// Its attachments go with it, in the same transaction — unless its
	// owner is under a legal hold: then they stay until the run is
	// purged (PurgeDeletedRuns).
	switch held, err := underLegalHold(ctx, tx, r.Owner); {
	case err != nil:
		return err
	case !held:
		if err := deleteRunAttachments(ctx, tx, r.ID); err != nil {
			return err
		}
	}
	if r.Status.Terminal() {
		now := storedTime(c.now())
		if _, err := tx.exec(ctx, deleteClosedRun, r.ID, now); err != nil {
			return err
		}
		// A run closed before closing withdrew its approvals may still
		// have open ones.
		if err := withdrawApprovals(ctx, tx, r, w, now); err != nil {
			return err
		}
		tx.notifyRuns(r)
		return nil
	}
	_, err := c.endRun(ctx, tx, r, RunCancelled, true, turnEnd, w)
	return err
}

func (c *core) ParkIdleRuns(ctx context.Context, quietSince time.Time) ([]Run, error) {
	var runs []Run
	err := c.inTx(ctx, func(x executor) error {
		now := storedTime(c.now())
		var err error
		if runs, err = queryAll(ctx, x, parkIdleRuns, scanRun, storedTime(quietSince), now); err != nil {
			return err
		}
		for _, r := range runs {
			if err := releaseRunHold(ctx, x, r.ID, now, ReleaseParked); err != nil {
				return err
			}
		}
		x.notifyRuns(runs...)
		return nil
	})
	if err != nil {
		return nil, c.fail(err)
	}
	return runs, nil
}

func (c *core) RunsToResume(ctx context.Context, limit int) ([]Run, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	runs, err := queryAll(ctx, c.reader(), runsToResume, scanRun, limit)
	if err != nil {
		return nil, c.fail(err)
	}
	return runs, nil
}

func (c *core) ListMessages(ctx context.Context, runID string, q MessageQuery) ([]Event, error) {
	if err := checkMessageQuery(q); err != nil {
		return nil, err
	}
	// The original line, named, is read as a run that never branched is:
	// by the events' branch alone, without the condition that reads a
	// line's segments (a cost on every row, which PostgreSQL's plans do
	// not shed even for branch 0).
	var branch any // NULL: the active branch
	line := messagesOfActive
	if q.Branch != nil {
		branch, line = *q.Branch, messagesOfBranch
		if *q.Branch == 0 {
			line = messagesOfOriginal
		}
	}
	last := 0
	if q.Last {
		last = 1
	}
	query := messageWindows[line][last]
	x := c.reader()
	events, err := queryAll(ctx, x, query, scanEvent, runID, q.After, beforeOrMax(q.Before), q.Limit, branch)
	if err != nil {
		return nil, c.fail(err)
	}
	if q.Last {
		slices.Reverse(events)
	}
	if len(events) == 0 {
		if err := checkRunExists(ctx, x, runID); err != nil {
			return nil, c.fail(err)
		}
	}
	return events, nil
}
