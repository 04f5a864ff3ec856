package store

import (
	"context"
	"slices"
	"sync"
	"time"
)

// auditLinger is how long an append that no caller waits for (a lazy
// one) may stay queued for another append to carry it: see appendAudit.
const auditLinger = 5 * time.Millisecond

// maxAuditBatch bounds the appends one transaction writes.
const maxAuditBatch = 64

// auditWriteTimeout bounds one write of queued appends. A write does not
// end with the context of the caller that started it, whose appends share
// it with others.
const auditWriteTimeout = 30 * time.Second

// pgAuditChain is what a process knows of the audit log's head, and the
// queue of its appends. Each write takes every append queued when it
// starts, in one transaction, so that concurrent appends share one
// transaction, one turn of the audit lock and one flush of the log.
//
// At most two writes are under way. The second starts once the first has
// sent its statements on a head it knew, when the first writes only how
// calls ended while no other call was in progress (see sent); its
// records are chained on the records the first is to make (see
// writeChained), so that its round trip overlaps the first's and it waits
// inside PostgreSQL only for the audit lock. A call's start that comes
// while the previous call's outcome is being written so takes one round
// trip to the database, not up to two. Writes end in order: a chained
// write takes over what the process knows of the head only once the write
// it is chained on has ended.
type pgAuditChain struct {
	linger time.Duration

	mu     sync.Mutex
	queue  []*pgAuditAppend
	writes int // writes under way: none, one, or one and another chained on it
	// ahead is the write under way that the next may be chained on: it
	// has sent its statements, chained on a head it knew, its appends are
	// all appendAlone, and nothing is chained on it yet. Nil for none.
	ahead *pgAuditWrite
	// How many writes were chained on another, and how many of those were
	// rolled back and written again (see writeChained).
	chainedWrites, chainedRetries int

	// What the process knows of the head, read and set by one write at a
	// time: a write that is not chained starts only when no other is under
	// way, and a chained one touches these only once the write it is
	// chained on has ended.
	head  AuditHead
	known bool
	// linked: the records of the last write that set head had Links
	// (see buildLinked).
	linked bool
	// After a collision, the next skip writes do not chain on the head
	// the process knows. Writes of records with Links (audit.Log's) are
	// then linked to the head by the database (appendLinked), in one round
	// trip as at a known head: skip and backoff go to maxAuditBackoff, and
	// a write that does not collide halves backoff. Others read the head
	// first, in two: skip is set from backoff, which doubles with each
	// collision (up to maxAuditBackoff) and is cleared by a write that
	// does not collide. While other processes append as often as this
	// one (replicas taking turns), few writes so collide.
	skip, backoff int
}

func newPGAuditChain() *pgAuditChain { return &pgAuditChain{linger: auditLinger} }

// pgAuditWrite is one write of queued appends.
type pgAuditWrite struct {
	batch []*pgAuditAppend
	// after is the write it is chained on, nil for none, and afterTail
	// the head its records were to make when this one started.
	after     *pgAuditWrite
	afterTail AuditHead
	// tail is the head the write's records make if it commits, set when
	// it becomes the chain's ahead.
	tail AuditHead
	done chan struct{} // closed when the write has ended
}

// appendKind says who waits for an audit append.
type appendKind int

const (
	// appendAnswers: the caller waits for the append to answer someone
	// (a decision, a tool call's start, before the call runs).
	appendAnswers appendKind = iota
	// appendAlone: how a call ended while no other call is in progress
	// (WriteNow), its result already on its way: written at once, and no
	// one waits for it to be answered. A write of only these may be
	// chained on (see sent).
	appendAlone
	// appendLazy: how a tool call ended while others are in progress: it
	// may wait to ride in another append's transaction (see appendAudit).
	appendLazy
)

// pgAuditAppend is one append to the audit log: queued, being written, or done.
type pgAuditAppend struct {
	step  *pgTxStep
	build func(AuditHead) (AuditRecord, error)
	lazy  bool // it does not start a write: it may linger (see appendAudit)
	alone bool // appendAlone

	rec  AuditRecord // built, and once done, written
	link *AuditLink  // rec's, when built to be linked by the database (see appendLinked)
	err  error
	done chan struct{}
}

// head is the head the append's record makes.
func (a *pgAuditAppend) head() AuditHead { return AuditHead{Seq: a.rec.Seq, Hash: a.rec.Hash} }

// waitedFor reports whether a caller waits for a to answer someone.
func (a *pgAuditAppend) waitedFor() bool { return !a.lazy }

// finishAppends ends each append of batch with err (nil: written).
func finishAppends(batch []*pgAuditAppend, err error) {
	for _, a := range batch {
		a.err = err
		close(a.done)
	}
}

// appendAudit appends the record build returns, after step if there is
// one, in one transaction (see writeAuditBatch), and returns it.
//
// Appends are queued and written by the chain's writes (see pgAuditChain),
// each taking every append queued when it starts (up to maxAuditBatch):
// while writes are under way, those that arrive wait and then go together.
// An append that arrives when a write may start is written at once, in its
// caller's goroutine. A lazy append, one whose caller does not wait for it
// to answer anyone (how a tool call ended, written after its result went
// back), does not start a write: it waits up to the chain's linger for an
// append that does, and rides in its transaction, or then starts one
// itself. Writing how one call ended with the start of the next takes one
// transaction, one turn of the audit lock and one flush of the log, where
// two would each take their own.
//
// When ctx ends while the append is queued, it is withdrawn and ctx's
// error returned; once its write has begun, its result is awaited.
func (s *postgresStore) appendAudit(ctx context.Context, step *pgTxStep, build func(AuditHead) (AuditRecord, error), kind appendKind) (AuditRecord, error) {
	if err := ctx.Err(); err != nil {
		return AuditRecord{}, err
	}
	c := s.audit
	lazy := kind == appendLazy
	a := &pgAuditAppend{step: step, build: build, lazy: lazy, alone: kind == appendAlone, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, a)
	w := c.startWriteLocked()
	wait := c.linger
	c.mu.Unlock()
	if w != nil {
		s.writeAudit(ctx, w)
	}

	var linger <-chan time.Time
	if lazy {
		t := time.NewTimer(wait)
		defer t.Stop()
		linger = t.C
	}
	for {
		select {
		case <-a.done:
			return a.rec, a.err
		case <-linger:
			linger = nil
			c.mu.Lock()
			a.lazy = false // no longer waits for a carrier
			w := c.startWriteLocked()
			c.mu.Unlock()
			if w != nil {
				s.writeAudit(ctx, w)
			}
		case <-ctx.Done():
			c.mu.Lock()
			i := slices.Index(c.queue, a)
			if i >= 0 {
				c.queue = slices.Delete(c.queue, i, i+1)
			}
			c.mu.Unlock()
			if i >= 0 {
				return AuditRecord{}, ctx.Err()
			}
			<-a.done
			return a.rec, a.err
		}
	}
}

// startWriteLocked returns the write the caller is to make now, or nil:
// one starts when an append that is waited for is queued and either no
// write is under way or the one under way is the chain's ahead, which the
// new one is then chained on. c.mu must be held.
func (c *pgAuditChain) startWriteLocked() *pgAuditWrite {
	if !slices.ContainsFunc(c.queue, (*pgAuditAppend).waitedFor) {
		return nil
	}
	w := &pgAuditWrite{done: make(chan struct{})}
	switch {
	case c.writes == 0:
	case c.writes == 1 && c.ahead != nil:
		w.after, w.afterTail, c.ahead = c.ahead, c.ahead.tail, nil
		c.chainedWrites++
	default:
		return nil
	}
	c.writes++
	return w
}

// writeAudit makes the write w of the appends queued when it begins
// (those that come while a write started in another goroutine waits to
// run go with it), and when appends that are waited for have been queued
// meanwhile, starts the next write in another goroutine, so that its
// caller can return.
func (s *postgresStore) writeAudit(ctx context.Context, w *pgAuditWrite) {
	c := s.audit
	c.mu.Lock()
	n := min(len(c.queue), maxAuditBatch)
	w.batch = slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	c.mu.Unlock()

	// The queue may be empty: its appends withdrawn by their callers.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	switch {
	case len(w.batch) == 0:
	case w.after != nil:
		s.writeChained(wctx, w)
	default:
		s.writeAuditBatch(wctx, w, w.batch)
	}
	cancel()

	c.mu.Lock()
	c.writes--
	if c.ahead == w {
		c.ahead = nil
	}
	close(w.done)
	next := c.startWriteLocked()
	c.mu.Unlock()
	if next != nil {
		go s.writeAudit(context.WithoutCancel(ctx), next)
	}
}

// sent is called once the statements of w, writing batch chained on a
// head the process knew, are on their way. When batch is only how calls
// ended while no other call was in progress (appendAlone), w becomes the
// chain's ahead, and a write chained on it starts if appends that are
// waited for are queued: a call's start that comes at once after the call
// before it then does not wait for that call's outcome to be written.
// Other writes are not chained on. Under load they carry many appends,
// whose steps a chained write would overtake to the lock (see
// writeChained), and one write after another carries what queues behind
// them in fewer transactions than two in flight would: at c=8 the
// database then did more work per call for no gain.
func (s *postgresStore) sent(ctx context.Context, w *pgAuditWrite, batch []*pgAuditAppend) {
	if slices.ContainsFunc(batch, func(a *pgAuditAppend) bool { return !a.alone }) {
		return
	}
	c := s.audit
	c.mu.Lock()
	w.tail, c.ahead = batch[len(batch)-1].head(), w
	next := c.startWriteLocked()
	c.mu.Unlock()
	if next != nil {
		go s.writeAudit(ctx, next)
	}
}

// unsent withdraws w as the chain's ahead: what it sent failed, and a
// write chained on its tail would fail too.
func (c *pgAuditChain) unsent(w *pgAuditWrite) {
	c.mu.Lock()
	if c.ahead == w {
		c.ahead = nil
	}
	c.mu.Unlock()
}
