package mcpserver

import (
	"context"
	"sync"
	"time"
)

// The audit records of refused tokens are sampled, per process: up to
// authAuditBurst at once, then one every authAuditInterval. A flood of bad
// tokens therefore cannot flood the audit log (each record is a durable
// write, serialised with every other record of every replica), while a few
// failures are each recorded as before.
const (
	authAuditBurst    = 20
	authAuditInterval = time.Second
)

// authAudits is the token bucket of those records. Every refused request
// is still answered (401 or 403) and logged; only its audit record may be
// left out, and the records left out are counted: the next record of a
// refused token carries the count (Event.Suppressed), and so does a record
// of kind KindAuthFailuresSuppressed written at the next authenticated
// request once the bucket allows, so that a flood that stops is summed up
// too.
type authAudits struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

// refill adds the tokens earned since the last call; a.mu is held.
func (a *authAudits) refill(now time.Time) {
	if a.last.IsZero() {
		a.tokens = authAuditBurst
	} else if d := now.Sub(a.last); d > 0 {
		a.tokens = min(authAuditBurst, a.tokens+float64(d)/float64(authAuditInterval))
	}
	if now.After(a.last) {
		a.last = now
	}
}

// take decides on the record of a refusal at now: whether to write it, and
// if so how many refusals before it were not recorded.
func (a *authAudits) take(now time.Time) (record bool, suppressed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refill(now)
	if a.tokens < 1 {
		a.suppressed++
		return false, 0
	}
	a.tokens--
	suppressed, a.suppressed = a.suppressed, 0
	return true, suppressed
}

// flush returns the number of refusals not recorded, once the bucket
// allows a record of them, and starts counting anew; 0 otherwise.
func (a *authAudits) flush(now time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.suppressed == 0 {
		return 0
	}
	a.refill(now)
	if a.tokens < 1 {
		return 0
	}
	a.tokens--
	n := a.suppressed
	a.suppressed = 0
	return n
}

// auditAuthFailure records a refused token, as the bucket allows. Nothing
// of the token is recorded: unverified claims are not evidence of anything.
func (s *Server) auditAuthFailure(ctx context.Context, reason string) {
	ok, suppressed := s.authAudits.take(s.opts.Now())
	if !ok {
		return
	}
	s.record(context.WithoutCancel(ctx), Event{Outcome: reason, Suppressed: suppressed}, KindAuthFailed)
}

// flushAuthFailures records how many refused tokens were not recorded, if
// any and once the bucket allows.
func (s *Server) flushAuthFailures(ctx context.Context) {
	if n := s.authAudits.flush(s.opts.Now()); n > 0 {
		s.record(context.WithoutCancel(ctx), Event{Suppressed: n}, KindAuthFailuresSuppressed)
	}
}
