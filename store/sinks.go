package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// AuditSinks is the state of the audit log's delivery to sinks: each
// sink's cursor (the last sequence delivered to it) and the lease of the
// one process that delivers to it. A cursor only moves forward, and only
// under its lease: a process whose lease was taken over writes nothing.
type AuditSinks interface {
	// AuditSink returns the state of the named sink, with the log's
	// backlog after its cursor. A sink never claimed has a zero cursor and
	// no lease; it is not an error.
	AuditSink(ctx context.Context, name string) (AuditSink, error)
	// ClaimAuditSink leases the named sink to owner for leaseFor, creating
	// its cursor at 0 when it has none, unless another lease on it has not
	// expired (ErrConflict). Each claim increments the fencing token.
	ClaimAuditSink(ctx context.Context, name, owner string, leaseFor time.Duration) (AuditSinkLease, error)
	// AdvanceAuditSink moves the sink's cursor to seq (at or after the
	// lease's DeliveredSeq) and extends the lease to leaseFor from now,
	// provided l still holds it (owner and fencing token), else
	// ErrConflict and nothing is written. With seq equal to the cursor it
	// only extends the lease.
	AdvanceAuditSink(ctx context.Context, l AuditSinkLease, seq int64, leaseFor time.Duration) (AuditSinkLease, error)
	// ReleaseAuditSink ends the lease l, so that another process may claim
	// the sink at once: ErrConflict when l no longer holds it.
	ReleaseAuditSink(ctx context.Context, l AuditSinkLease) error
}

// AuditSink is the delivery state of one sink.
type AuditSink struct {
	Name string
	// DeliveredSeq is the sequence of the last record delivered; 0 for
	// none. DeliveredAt is when the cursor last moved; zero for never.
	DeliveredSeq int64
	DeliveredAt  time.Time
	// LeaseOwner and LeaseExpiresAt are the lease's, empty and zero for
	// none; FencingToken counts the claims.
	LeaseOwner     string
	LeaseExpiresAt time.Time
	FencingToken   int64
	// HeadSeq is the sequence of the log's newest record (0 for an empty
	// log), and PendingAt the time of the oldest record after the cursor
	// (zero when the sink has every record): the sink's lag.
	HeadSeq   int64
	PendingAt time.Time
}

// AuditSinkLease is a lease on a sink's delivery: its holder, fencing
// token and expiry, and the cursor as the holder last wrote it.
type AuditSinkLease struct {
	Sink         string
	Owner        string
	Token        int64
	ExpiresAt    time.Time
	DeliveredSeq int64
}

var (
	auditSink = sql1(`
SELECT n.name, coalesce(s.delivered_seq, 0), s.delivered_at, coalesce(s.lease_owner, ''), s.lease_expires_at,
	coalesce(s.fencing_token, 0),
	(SELECT coalesce(max(seq), 0) FROM audit_log),
	(SELECT at FROM audit_log WHERE seq > coalesce(s.delivered_seq, 0) ORDER BY seq LIMIT 1)
FROM (SELECT $1::text AS name) AS n LEFT JOIN audit_sinks s ON s.name = n.name`)

	// claimAuditSink creates the cursor, or takes a lease that is free or
	// expired; it returns no row when another lease holds the sink.
	claimAuditSink = sql1(`
INSERT INTO audit_sinks (name, lease_owner, lease_expires_at, fencing_token) VALUES ($1, $2, $3, 1)
ON CONFLICT (name) DO UPDATE SET lease_owner = excluded.lease_owner,
	lease_expires_at = excluded.lease_expires_at, fencing_token = audit_sinks.fencing_token + 1
WHERE audit_sinks.lease_owner IS NULL OR audit_sinks.lease_expires_at < $4
RETURNING fencing_token, lease_expires_at, delivered_seq`)

	advanceAuditSink = sql1(`
UPDATE audit_sinks SET delivered_seq = $4,
	delivered_at = CASE WHEN $4::bigint > delivered_seq THEN $5::timestamptz ELSE delivered_at END,
	lease_expires_at = $6
WHERE name = $1 AND lease_owner = $2 AND fencing_token = $3 AND delivered_seq <= $4
RETURNING lease_expires_at`)

	releaseAuditSink = sql1(`
UPDATE audit_sinks SET lease_owner = NULL, lease_expires_at = NULL
WHERE name = $1 AND lease_owner = $2 AND fencing_token = $3`)
)

// checkAuditSinkLease validates a lease given back to the store.
func checkAuditSinkLease(l AuditSinkLease) error {
	var errs []error
	if l.Sink == "" {
		errs = append(errs, errors.New("audit sink lease names no sink"))
	}
	if l.Owner == "" {
		errs = append(errs, errors.New("audit sink lease owner is empty"))
	}
	if l.Token < 1 {
		errs = append(errs, fmt.Errorf("audit sink lease fencing token is %d", l.Token))
	}
	return invalid(errs...)
}

// checkSinkClaim validates the names of a claim.
func checkSinkClaim(name, owner string) error {
	var errs []error
	if name == "" {
		errs = append(errs, errors.New("audit sink name is empty"))
	}
	if owner == "" {
		errs = append(errs, errors.New("audit sink lease owner is empty"))
	}
	errs = append(errs, checkText("audit sink name", name), checkText("audit sink lease owner", owner))
	return invalid(errs...)
}

func (c *core) AuditSink(ctx context.Context, name string) (AuditSink, error) {
	if err := invalid(checkText("audit sink name", name)); err != nil {
		return AuditSink{}, err
	}
	var s AuditSink
	err := c.reader().row(ctx, auditSink, name).Scan(&s.Name, &s.DeliveredSeq, at(&s.DeliveredAt),
		&s.LeaseOwner, at(&s.LeaseExpiresAt), &s.FencingToken, &s.HeadSeq, at(&s.PendingAt))
	return s, c.fail(err)
}

func (c *core) ClaimAuditSink(ctx context.Context, name, owner string, leaseFor time.Duration) (AuditSinkLease, error) {
	l := AuditSinkLease{Sink: name, Owner: owner}
	if err := errors.Join(checkLeaseFor(leaseFor), checkSinkClaim(name, owner)); err != nil {
		return AuditSinkLease{}, err
	}
	err := c.writeOne(ctx, func(x executor) error {
		now := c.now()
		err := x.row(ctx, claimAuditSink, name, owner, storedTime(now.Add(leaseFor)), storedTime(now)).
			Scan(&l.Token, at(&l.ExpiresAt), &l.DeliveredSeq)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: audit sink %q is leased to another process", ErrConflict, name)
		}
		return err
	})
	if err != nil {
		return AuditSinkLease{}, c.fail(err)
	}
	return l, nil
}

func (c *core) AdvanceAuditSink(ctx context.Context, l AuditSinkLease, seq int64, leaseFor time.Duration) (AuditSinkLease, error) {
	if err := errors.Join(checkAuditSinkLease(l), checkLeaseFor(leaseFor)); err != nil {
		return AuditSinkLease{}, err
	}
	if seq < l.DeliveredSeq {
		return AuditSinkLease{}, invalid(fmt.Errorf("audit sink cursor %d is before the lease's %d", seq, l.DeliveredSeq))
	}
	err := c.writeOne(ctx, func(x executor) error {
		now := c.now()
		err := x.row(ctx, advanceAuditSink, l.Sink, l.Owner, l.Token, seq, storedTime(now), storedTime(now.Add(leaseFor))).
			Scan(at(&l.ExpiresAt))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: the lease on audit sink %q was lost", ErrConflict, l.Sink)
		}
		return err
	})
	if err != nil {
		return AuditSinkLease{}, c.fail(err)
	}
	l.DeliveredSeq = seq
	return l, nil
}

func (c *core) ReleaseAuditSink(ctx context.Context, l AuditSinkLease) error {
	if err := checkAuditSinkLease(l); err != nil {
		return err
	}
	return c.fail(c.writeOne(ctx, func(x executor) error {
		n, err := x.exec(ctx, releaseAuditSink, l.Sink, l.Owner, l.Token)
		if err == nil && n == 0 {
			err = fmt.Errorf("%w: the lease on audit sink %q was lost", ErrConflict, l.Sink)
		}
		return err
	}))
}
