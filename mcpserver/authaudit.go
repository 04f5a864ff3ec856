package mcpserver

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
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

// authAudits samples those records with a token bucket (x/time/rate).
// Every refused request is still answered (401 or 403) and logged; only its
// audit record may be left out, and the records left out are counted: the
// next record of a refused token carries the count (Event.Suppressed), and
// so does a record of kind KindAuthFailuresSuppressed written at the next
// authenticated request once the bucket allows, so that a flood that stops
// is summed up too. The zero value is ready for use.
type authAudits struct {
	mu         sync.Mutex
	bucket     *rate.Limiter // made on first use
	suppressed int
}

// allowLocked reports whether the bucket allows a record at now; a.mu is
// held.
func (a *authAudits) allowLocked(now time.Time) bool {
	if a.bucket == nil {
		a.bucket = rate.NewLimiter(rate.Every(authAuditInterval), authAuditBurst)
	}
	return a.bucket.AllowN(now, 1)
}

// take decides on the record of a refusal at now: whether to write it, and
// if so how many refusals before it were not recorded.
func (a *authAudits) take(now time.Time) (record bool, suppressed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.allowLocked(now) {
		a.suppressed++
		return false, 0
	}
	suppressed, a.suppressed = a.suppressed, 0
	return true, suppressed
}

// flush returns the number of refusals not recorded, once the bucket
// allows a record of them, and starts counting anew; 0 otherwise.
func (a *authAudits) flush(now time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.suppressed == 0 || !a.allowLocked(now) {
		return 0
	}
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
