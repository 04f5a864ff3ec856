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
// queue of its appends: one write at a time, of every append queued when
// it starts, so that each write chains to the head the one before it
// wrote, and concurrent appends share one transaction, one turn of the
// audit lock and one flush of the log.
type pgAuditChain struct {
	linger time.Duration

	mu      sync.Mutex
	queue   []*pgAuditAppend
	writing bool // a write is under way

	// Of the write under way:
	head  AuditHead
	known bool
	// After a collision, the next skip writes read the head first; skip
	// is set from backoff, which doubles with each collision (up to
	// maxAuditBackoff) and is cleared by a write that does not collide.
	// While other processes append as often as this one, most writes so
	// take two round trips, not a failed one and then two.
	skip, backoff int
}

func newPGAuditChain() *pgAuditChain { return &pgAuditChain{linger: auditLinger} }

// pgAuditAppend is one append to the audit log: queued, being written, or done.
type pgAuditAppend struct {
	step  *pgTxStep
	build func(AuditHead) (AuditRecord, error)
	lazy  bool // no caller waits for it: it may linger (see appendAudit)

	rec  AuditRecord // built, and once done, written
	err  error
	done chan struct{}
}

// head is the head the append's record makes.
func (a *pgAuditAppend) head() AuditHead { return AuditHead{Seq: a.rec.Seq, Hash: a.rec.Hash} }

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
// Appends are queued and written one transaction at a time, each write
// taking every append queued when it starts (up to maxAuditBatch): while
// one is written, those that arrive wait and then go together. An append
// that arrives with none under way is written at once, in its caller's
// goroutine. A lazy append, one whose caller does not wait for it to
// answer anyone (how a tool call ended, written after its result went
// back), does not start a write: it waits up to the chain's linger for an
// append that does, and rides in its transaction, or then starts one
// itself. Writing how one call ended with the start of the next takes one
// transaction, one turn of the audit lock and one flush of the log, where
// two would each take their own.
//
// When ctx ends while the append is queued, it is withdrawn and ctx's
// error returned; once its write has begun, its result is awaited.
func (s *postgresStore) appendAudit(ctx context.Context, step *pgTxStep, build func(AuditHead) (AuditRecord, error), lazy bool) (AuditRecord, error) {
	if err := ctx.Err(); err != nil {
		return AuditRecord{}, err
	}
	c := s.audit
	a := &pgAuditAppend{step: step, build: build, lazy: lazy, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, a)
	write := c.startWriteLocked()
	wait := c.linger
	c.mu.Unlock()
	if write {
		s.writeAudit(ctx)
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
			write := c.startWriteLocked()
			c.mu.Unlock()
			if write {
				s.writeAudit(ctx)
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

// startWriteLocked reports whether the caller is to write the queue now:
// no write is under way and an append that is waited for is queued. c.mu
// must be held.
func (c *pgAuditChain) startWriteLocked() bool {
	if c.writing || !slices.ContainsFunc(c.queue, func(a *pgAuditAppend) bool { return !a.lazy }) {
		return false
	}
	c.writing = true
	return true
}

// writeAudit writes the queued appends, one transaction, and when appends
// that are waited for have been queued meanwhile, starts the next write in
// another goroutine, so that its caller can return.
func (s *postgresStore) writeAudit(ctx context.Context) {
	c := s.audit
	c.mu.Lock()
	n := min(len(c.queue), maxAuditBatch)
	batch := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	c.mu.Unlock()

	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	s.writeAuditBatch(wctx, batch)
	cancel()

	c.mu.Lock()
	c.writing = false
	again := c.startWriteLocked()
	c.mu.Unlock()
	if again {
		go s.writeAudit(context.WithoutCancel(ctx))
	}
}
