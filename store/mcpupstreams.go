package store

import (
	"context"
	"errors"
	"time"
)

// The bounds of an UpstreamSession.
const (
	// MaxUpstreamSessionKey bounds an UpstreamSession's Key, in bytes: a
	// hash of the pool key in text, with room to spare.
	MaxUpstreamSessionKey = 128
	// MaxUpstreamSessionID bounds an UpstreamSession's Session, in bytes:
	// the upstream's Mcp-Session-Id, sealed.
	MaxUpstreamSessionID = 2048
	// MaxUpstreamSessionResult bounds an UpstreamSession's
	// InitializeResult, in bytes: an upstream's capabilities, information
	// and instructions.
	MaxUpstreamSessionResult = 64 << 10
)

// UpstreamSession is a session to a stateful HTTP upstream that the
// replicas share: the replica that opened it recorded it, and a replica
// that needs a session of the same Key joins it rather than opening
// another, so that the upstream sees one session whichever replica calls.
type UpstreamSession struct {
	// Key names the pool key the session serves (a hash of the upstream,
	// the caller and how the session meets the upstream's requests). At
	// most MaxUpstreamSessionKey bytes; one record per key.
	Key string
	// Session is the upstream's Mcp-Session-Id as the caller sealed it:
	// the store never sees the id itself, a capability. At most
	// MaxUpstreamSessionID bytes.
	Session string
	// ProtocolVersion is the protocol version the session negotiated.
	ProtocolVersion string
	// InitializeResult is the upstream's answer to the session's
	// initialize (JSON), at most MaxUpstreamSessionResult bytes.
	InitializeResult []byte
	CreatedAt        time.Time
	// ExpiresAt is when the record ends: a replica then opens a session
	// of its own, and records it.
	ExpiresAt time.Time
	// UsedAt is when a replica last used the session, coarsely (see
	// TouchUpstreamSession); PutUpstreamSession sets it to CreatedAt.
	UsedAt time.Time
}

// Active reports whether the record may still be joined at now.
func (s UpstreamSession) Active(now time.Time) bool { return now.Before(s.ExpiresAt) }

// upstreamSessionColumns is the column list of an UpstreamSession, in
// field order.
const upstreamSessionColumns = `pool_key, session, protocol_version, initialize_result, created_at, expires_at, used_at`

// checkUpstreamSession validates a record PutUpstreamSession writes.
func checkUpstreamSession(s UpstreamSession) error {
	var errs []error
	switch {
	case s.Key == "":
		errs = append(errs, errors.New("upstream session Key is empty"))
	case len(s.Key) > MaxUpstreamSessionKey:
		errs = append(errs, errors.New("upstream session Key is longer than MaxUpstreamSessionKey"))
	}
	switch {
	case s.Session == "":
		errs = append(errs, errors.New("upstream session Session is empty"))
	case len(s.Session) > MaxUpstreamSessionID:
		errs = append(errs, errors.New("upstream session Session is longer than MaxUpstreamSessionID"))
	}
	if s.ProtocolVersion == "" || len(s.ProtocolVersion) > 64 {
		errs = append(errs, errors.New("upstream session ProtocolVersion must be 1 to 64 bytes"))
	}
	switch {
	case len(s.InitializeResult) == 0:
		errs = append(errs, errors.New("upstream session InitializeResult is empty"))
	case len(s.InitializeResult) > MaxUpstreamSessionResult:
		errs = append(errs, errors.New("upstream session InitializeResult is larger than MaxUpstreamSessionResult"))
	}
	if s.ExpiresAt.IsZero() {
		errs = append(errs, errors.New("upstream session ExpiresAt is zero"))
	} else if !s.ExpiresAt.After(s.CreatedAt) {
		errs = append(errs, errors.New("upstream session ExpiresAt is not after CreatedAt"))
	}
	errs = append(errs,
		checkText("upstream session Key", s.Key),
		checkText("upstream session Session", s.Session),
		checkText("upstream session ProtocolVersion", s.ProtocolVersion),
		checkText("upstream session InitializeResult", string(s.InitializeResult)),
		checkTime("upstream session CreatedAt", s.CreatedAt),
		checkTime("upstream session ExpiresAt", s.ExpiresAt))
	return invalid(errs...)
}

var (
	// replaceUpstreamSession is the compare-and-swap of a record.
	replaceUpstreamSession = sql1(`
UPDATE mcp_upstream_sessions SET session = $3, protocol_version = $4, initialize_result = $5, created_at = $6, expires_at = $7, used_at = $6
WHERE pool_key = $1 AND session = $2`)

	insertUpstreamSession = sql1(`
INSERT INTO mcp_upstream_sessions (` + upstreamSessionColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $5)`)

	getUpstreamSession = sql1(`SELECT ` + upstreamSessionColumns + ` FROM mcp_upstream_sessions WHERE pool_key = $1`)

	// touchUpstreamSession moves a record's used_at forward, never back,
	// and matches the record whenever it holds the session.
	touchUpstreamSession = perEngine(`
UPDATE mcp_upstream_sessions SET used_at = GREATEST(used_at, $3) WHERE pool_key = $1 AND session = $2`, `
UPDATE mcp_upstream_sessions SET used_at = MAX(used_at, $3) WHERE pool_key = $1 AND session = $2`)

	// resealUpstreamSession puts a new seal of a record's session in
	// place of the old, and moves its used_at forward as a touch does.
	resealUpstreamSession = perEngine(`
UPDATE mcp_upstream_sessions SET session = $3, used_at = GREATEST(used_at, $4) WHERE pool_key = $1 AND session = $2`, `
UPDATE mcp_upstream_sessions SET session = $3, used_at = MAX(used_at, $4) WHERE pool_key = $1 AND session = $2`)

	// claimIdleUpstreamSessions deletes, and returns, up to $2 of the
	// records last used at or before $1, the idlest first (reading
	// mcp_upstream_sessions_used_idx). On PostgreSQL the rows another
	// claim holds are skipped rather than waited for, and the outer
	// condition is checked again on each row deleted, so that a row a
	// touch moved forward meanwhile is left; SQLite runs one writer at a
	// time.
	claimIdleUpstreamSessions = perEngine(claimIdle(" FOR UPDATE SKIP LOCKED"), claimIdle(""))
)

// claimIdle is the text of claimIdleUpstreamSessions, with the locking
// clause of its choice of rows.
func claimIdle(lock string) string {
	return `
DELETE FROM mcp_upstream_sessions
WHERE pool_key IN (SELECT pool_key FROM mcp_upstream_sessions WHERE used_at <= $1 ORDER BY used_at LIMIT $2` + lock + `)
	AND used_at <= $1
RETURNING ` + upstreamSessionColumns
}

func (c *core) PutUpstreamSession(ctx context.Context, s UpstreamSession, old string) (UpstreamSession, error) {
	if s.CreatedAt.IsZero() {
		s.CreatedAt = c.now()
	}
	s.CreatedAt, s.ExpiresAt = storedTime(s.CreatedAt), storedTime(s.ExpiresAt)
	s.UsedAt = s.CreatedAt
	if err := checkUpstreamSession(s); err != nil {
		return UpstreamSession{}, err
	}
	err := c.inTx(ctx, func(x executor) error {
		if old != "" {
			n, err := x.exec(ctx, replaceUpstreamSession, s.Key, old,
				s.Session, s.ProtocolVersion, string(s.InitializeResult), s.CreatedAt, s.ExpiresAt)
			if err != nil || n == 1 {
				return err
			}
		}
		// No record (the one replaced is gone): a record there now is
		// another's, and the insert conflicts.
		_, err := x.exec(ctx, insertUpstreamSession,
			s.Key, s.Session, s.ProtocolVersion, string(s.InitializeResult), s.CreatedAt, s.ExpiresAt)
		return err
	})
	if err != nil {
		return UpstreamSession{}, c.fail(err)
	}
	return s, nil
}

func (c *core) GetUpstreamSession(ctx context.Context, key string) (UpstreamSession, error) {
	s, err := scanUpstreamSession(c.reader().row(ctx, getUpstreamSession, key))
	if err != nil {
		return UpstreamSession{}, c.fail(err)
	}
	return s, nil
}

func (c *core) TouchUpstreamSession(ctx context.Context, key, session string, at time.Time) (bool, error) {
	at = storedTime(at)
	if err := checkTime("upstream session UsedAt", at); err != nil {
		return false, invalid(err)
	}
	return c.updateUpstreamSession(ctx, touchUpstreamSession, key, session, at)
}

func (c *core) ResealUpstreamSession(ctx context.Context, key, old, session string, at time.Time) (bool, error) {
	at = storedTime(at)
	var errs []error
	switch {
	case session == "":
		errs = append(errs, errors.New("upstream session Session is empty"))
	case len(session) > MaxUpstreamSessionID:
		errs = append(errs, errors.New("upstream session Session is longer than MaxUpstreamSessionID"))
	}
	errs = append(errs, checkText("upstream session Session", session), checkTime("upstream session UsedAt", at))
	if err := invalid(errs...); err != nil {
		return false, err
	}
	return c.updateUpstreamSession(ctx, resealUpstreamSession, key, old, session, at)
}

// updateUpstreamSession runs an update of one record (its pool key and
// session the first arguments) and reports whether it matched one.
func (c *core) updateUpstreamSession(ctx context.Context, q stmt, args ...any) (bool, error) {
	var n int64
	err := c.inTx(ctx, func(x executor) error {
		var err error
		n, err = x.exec(ctx, q, args...)
		return err
	})
	if err != nil {
		return false, c.fail(err)
	}
	return n == 1, nil
}

func (c *core) ClaimIdleUpstreamSessions(ctx context.Context, usedBefore time.Time, limit int) ([]UpstreamSession, error) {
	usedBefore = storedTime(usedBefore)
	if limit <= 0 {
		return nil, invalid(errors.New("ClaimIdleUpstreamSessions needs a positive limit"))
	}
	var out []UpstreamSession
	err := c.inTx(ctx, func(x executor) error {
		out = nil
		rows, err := x.query(ctx, claimIdleUpstreamSessions, usedBefore, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			s, err := scanUpstreamSession(rows)
			if err != nil {
				return err
			}
			out = append(out, s)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, c.fail(err)
	}
	return out, nil
}

// scanUpstreamSession scans a row of upstreamSessionColumns.
func scanUpstreamSession(row interface{ Scan(...any) error }) (UpstreamSession, error) {
	var s UpstreamSession
	var result string
	if err := row.Scan(&s.Key, &s.Session, &s.ProtocolVersion, &result, at(&s.CreatedAt), at(&s.ExpiresAt), at(&s.UsedAt)); err != nil {
		return UpstreamSession{}, err
	}
	s.InitializeResult = []byte(result)
	return s, nil
}
