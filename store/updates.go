package store

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Notification tells live-update subscribers that something changed. It
// is a hint, never the data: subscribers read what changed from the
// database (the run's event log, the run row, the approval), so a lost or
// doubled notification loses or doubles nothing. Deltas are the exception:
// they carry streamed text that is never stored, and the committed
// message that follows them is.
type Notification struct {
	// Kind is one of the Notify* constants.
	Kind string `json:"k"`
	// RunID is the run concerned, if any.
	RunID string `json:"r,omitempty"`
	// Owner is the principal concerned (the run's owner, the approval's
	// requester); empty when unknown, which concerns everyone.
	Owner string `json:"o,omitempty"`
	// Seq is, for NotifyEvent, the sequence of the appended event.
	Seq int64 `json:"s,omitempty"`
	// ApprovalID is the approval concerned, for NotifyApproval.
	ApprovalID string `json:"a,omitempty"`
	// MessageSeq and Text are a NotifyDelta's turn (its user message) and
	// streamed text.
	MessageSeq int64  `json:"m,omitempty"`
	Text       string `json:"t,omitempty"`
	// Session and From are a NotifyMCPAnswer's MCP session (its record's
	// id) and the process that published it; its Text is the answer. A
	// NotifyHeldInput's Session is the held call, a NotifyHeldOutcome's
	// the delivery it answers; their Text is what they carry.
	Session string `json:"x,omitempty"`
	From    string `json:"f,omitempty"`
	// Kept names, in the PostgreSQL notification of a NotifyMCPAnswer
	// whose Text is too large for one, the row the store kept the Text
	// in (see MaxMCPAnswer). Updates reads the Text back: publishers
	// never set Kept, and subscribers never see it set.
	Kept string `json:"ka,omitempty"`
}

// The kinds of Notification.
const (
	// NotifyEvent: an event was appended to a run's log.
	NotifyEvent = "event"
	// NotifyRun: a run's row changed (created, status, lease, deleted).
	NotifyRun = "run"
	// NotifyApproval: an approval was requested or changed state.
	NotifyApproval = "approval"
	// NotifyDelta: assistant text streamed while a turn runs.
	NotifyDelta = "delta"
	// NotifyHold: a replica took a run's held MCP session over (see
	// Holds.HoldSession); the replica that held it before closes its own.
	NotifyHold = "hold"
	// NotifyResync: notifications may have been lost (the listener
	// reconnected, or the subscriber fell UpdateBuffer behind);
	// subscribers should read the database again.
	NotifyResync = "resync"
	// NotifyMCPAnswer: a client's answer to a request an MCP session sent
	// it, received by one replica and passed to the others: the one that
	// sent the request delivers it (see mcpserver's sessions).
	NotifyMCPAnswer = "mcp_answer"
	// NotifyHeldInput: a caller's answers for an upstream call held open
	// on another replica (see mcpserver's held calls), received by the
	// replica that publishes them, and that replica's later word on them
	// (go ahead, or withdrawn): the one that holds the call delivers the
	// answers once told to go ahead.
	NotifyHeldInput = "held_input"
	// NotifyHeldOutcome: what a held call did after a NotifyHeldInput (its
	// receipt, then its result or its next request for input), published
	// by the replica that holds it for the one that waits.
	NotifyHeldOutcome = "held_outcome"
	// NotifyMCPSession: the record of an MCP session changed (a log level,
	// a subscription): the replicas that hold a copy of it bring the copy
	// to the record.
	NotifyMCPSession = "mcp_session"
)

// The bounds of the answers a NotifyMCPAnswer carries.
const (
	// MaxMCPAnswer bounds the Text of one NotifyMCPAnswer, in bytes: as
	// large as the MCP server's default request body.
	MaxMCPAnswer = 1 << 20
	// MCPAnswerRetention is how long PostgreSQL keeps an answer too large
	// for a notification, for the other processes to read: those older
	// are deleted as new ones are kept.
	MCPAnswerRetention = 5 * time.Minute
	// maxNotifiedMCPAnswer bounds the Text a notification carries itself,
	// so that the payload fits a PostgreSQL notification (8000 bytes)
	// whatever its escaping; a larger one is kept in mcp_answers.
	maxNotifiedMCPAnswer = 3500
)

// MaxDeltaText bounds the text of one NotifyDelta, so that the payload fits
// a PostgreSQL notification (8000 bytes) whatever its escaping.
const MaxDeltaText = 1200

// checkDelta validates what a caller publishes: a delta, an MCP answer, or
// an MCP session's change.
func checkDelta(n Notification) error {
	if n.Kind == NotifyMCPSession {
		if n.Session == "" || n.From == "" {
			return invalid(errors.New("an MCP session's change needs the session and its publisher"))
		}
		return nil
	}
	if carriesText(n.Kind) {
		if n.Session == "" || n.From == "" || n.Text == "" || n.Kept != "" || len(n.Text) > MaxMCPAnswer || !utf8.ValidString(n.Text) {
			return invalid(fmt.Errorf("an MCP answer or a held call's input or outcome needs a session, its publisher and at most %d bytes of text", MaxMCPAnswer))
		}
		return nil
	}
	if n.Kind != NotifyDelta {
		return invalid(fmt.Errorf("only %s notifications are published by callers, not %q", NotifyDelta, n.Kind))
	}
	if n.RunID == "" || len(n.Text) > MaxDeltaText*4 || utf8.RuneCountInString(n.Text) > MaxDeltaText || !utf8.ValidString(n.Text) {
		return invalid(errors.New("a delta needs a run ID and at most 1200 characters of text"))
	}
	return nil
}

// carriesText reports whether a kind of notification carries a text of
// up to MaxMCPAnswer bytes, kept in mcp_answers on PostgreSQL when it is
// too large for a notification.
func carriesText(kind string) bool {
	return kind == NotifyMCPAnswer || kind == NotifyHeldInput || kind == NotifyHeldOutcome
}

func (s *sqliteStore) Updates(ctx context.Context) (<-chan Notification, error) {
	return s.updates.subscribe(ctx, nil)
}

func (s *sqliteStore) Publish(_ context.Context, n Notification) error {
	if err := checkDelta(n); err != nil {
		return err
	}
	s.updates.publish(n)
	return nil
}

// pgUpdatesChannel is the notification channel of the connection's schema.
const pgUpdatesChannel = `'usher_updates.' || current_schema()`

// pgNotify sends a notification on the schema's updates channel; inside a
// transaction it is delivered at commit.
const pgNotify = `SELECT pg_notify(` + pgUpdatesChannel + `, $1)`

// pgNotifyOn sends n through exec (on the pool, or on a transaction to
// send it at commit).
func pgNotifyOn(ctx context.Context, exec func(ctx context.Context, sql string, args ...any) error, n Notification) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	return exec(ctx, pgNotify, string(b))
}

func (s *postgresStore) Publish(ctx context.Context, n Notification) error {
	if err := checkDelta(n); err != nil {
		return err
	}
	if carriesText(n.Kind) && len(n.Text) > maxNotifiedMCPAnswer {
		return s.publishKept(ctx, n)
	}
	return pgError(pgNotifyOn(ctx, s.poolExec, n))
}

var (
	// insertMCPAnswer keeps an answer too large for a notification.
	insertMCPAnswer = sql1(`INSERT INTO mcp_answers (id, body, created_at) VALUES ($1, $2::bytea, $3::timestamptz)`)
	// deleteOldMCPAnswers sweeps the answers past their retention.
	deleteOldMCPAnswers = sql1(`DELETE FROM mcp_answers WHERE created_at < $1`)
	// selectMCPAnswer reads a kept answer back.
	selectMCPAnswer = sql1(`SELECT body FROM mcp_answers WHERE id = $1`)
	// notifyKept sends a notification at the commit of the answer's row.
	notifyKept = postgresOnly(pgNotify)
)

// publishKept keeps the Text of an answer too large for a notification in
// mcp_answers and notifies its row's id at commit, sweeping the answers
// past MCPAnswerRetention in the same transaction.
func (s *postgresStore) publishKept(ctx context.Context, n Notification) error {
	now := storedTime(s.now())
	id := rand.Text()
	b, err := json.Marshal(Notification{Kind: n.Kind, Owner: n.Owner, Session: n.Session, From: n.From, Kept: id})
	if err != nil {
		return err
	}
	return s.fail(s.inTx(ctx, func(x executor) error {
		if _, err := x.exec(ctx, deleteOldMCPAnswers, now.Add(-MCPAnswerRetention)); err != nil {
			return err
		}
		if _, err := x.exec(ctx, insertMCPAnswer, id, []byte(n.Text), now); err != nil {
			return err
		}
		_, err := x.exec(ctx, notifyKept, string(b))
		return err
	}))
}

// readKept fills the Text of a notification of a kept answer from its
// row, or reports that the row is gone (swept past its retention).
func (s *postgresStore) readKept(ctx context.Context, n *Notification) bool {
	var body []byte
	if err := s.reader().row(ctx, selectMCPAnswer, n.Kept).Scan(&body); err != nil {
		s.log.WarnContext(ctx, "store: a kept MCP answer could not be read", "err", err)
		return false
	}
	n.Text, n.Kept = string(body), ""
	return true
}

// poolExec runs a statement on the pool.
func (s *postgresStore) poolExec(ctx context.Context, sql string, args ...any) error {
	_, err := s.pool.Exec(ctx, sql, args...)
	return err
}

// pgUpdates is a PostgreSQL store's listener of its updates channel: one
// connection outside the pool, shared by every subscriber of Updates. The
// first subscriber starts it, and it stops when the last one leaves or the
// store closes; the next subscriber starts it again.
type pgUpdates struct {
	hub updateHub

	// mu is held while the listener starts or stops, so that two never
	// run at once and a subscriber joins a listener that listens.
	mu          sync.Mutex
	subscribers int
	closed      bool
	stop        context.CancelFunc // the running listener's; nil when none runs
	stopped     chan struct{}      // closed when the running listener has stopped
}

// Updates subscribes to the store's listener, which it starts if no other
// subscriber has: Updates returns once the listener LISTENs, so the
// subscriber gets every notification sent after it returned. The listener
// decodes each notification once for all subscribers (reading a kept
// answer's row once) and, after its connection is lost and restored, sends
// them NotifyResync: a subscriber that joins while it is lost gets that
// resync.
func (s *postgresStore) Updates(ctx context.Context) (<-chan Notification, error) {
	u := &s.updates
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, errStoreClosed
	}
	if u.subscribers == 0 {
		// The listener's connection is opened for this caller, and its
		// failure is this caller's; then the listener lives on its own.
		conn, err := s.listenOn(ctx, `SELECT `+pgUpdatesChannel)
		if err != nil {
			return nil, err
		}
		var listen context.Context
		listen, u.stop = context.WithCancel(context.Background())
		u.stopped = make(chan struct{})
		go s.listenUpdates(listen, conn, u.stopped)
	}
	ch, err := u.hub.subscribe(ctx, s.leaveUpdates)
	if err != nil {
		if u.subscribers == 0 {
			u.stopListener()
		}
		return nil, err
	}
	u.subscribers++
	return ch, nil
}

// leaveUpdates counts a subscriber out, and stops the listener when it
// was the last one.
func (s *postgresStore) leaveUpdates() {
	u := &s.updates
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.subscribers--; u.subscribers == 0 {
		u.stopListener()
	}
}

// closeUpdates stops the listener and closes every subscriber's channel.
func (s *postgresStore) closeUpdates() {
	u := &s.updates
	u.mu.Lock()
	u.closed = true
	u.stopListener()
	u.mu.Unlock()
	u.hub.close()
}

// stopListener stops the listener, if one runs, and waits until it has
// closed its connection. The caller holds u.mu.
func (u *pgUpdates) stopListener() {
	if u.stop == nil {
		return
	}
	u.stop()
	<-u.stopped
	u.stop, u.stopped = nil, nil
}

// listenUpdates is the listener: it publishes what conn hears to the
// subscribers until ctx ends, reconnecting when the connection is lost.
func (s *postgresStore) listenUpdates(ctx context.Context, conn *pgx.Conn, stopped chan<- struct{}) {
	defer close(stopped)
	defer func() {
		if conn != nil {
			closeConn(conn)
		}
	}()
	hub := &s.updates.hub
	for {
		if conn == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pgListenRetry):
			}
			var err error
			if conn, err = s.listenOn(ctx, `SELECT `+pgUpdatesChannel); err != nil {
				if ctx.Err() == nil {
					s.log.WarnContext(ctx, "store: reconnecting the updates listener failed", "err", err)
				}
				conn = nil
				continue
			}
			hub.publish(Notification{Kind: NotifyResync})
		}
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.WarnContext(ctx, "store: the updates listener lost its connection", "err", err)
			closeConn(conn)
			conn = nil
			continue
		}
		var n Notification
		if err := json.Unmarshal([]byte(msg.Payload), &n); err != nil {
			s.log.WarnContext(ctx, "store: an unreadable notification", "err", err)
			continue
		}
		if n.Kept != "" && !s.readKept(ctx, &n) {
			continue
		}
		hub.publish(n)
	}
}
