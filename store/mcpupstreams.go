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
}

// Active reports whether the record may still be joined at now.
func (s UpstreamSession) Active(now time.Time) bool { return now.Before(s.ExpiresAt) }

// upstreamSessionColumns is the column list of an UpstreamSession, in
// field order.
const upstreamSessionColumns = `pool_key, session, protocol_version, initialize_result, created_at, expires_at`

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
	// deleteEndedUpstreamSessions deletes the records that have ended, as
	// a record is written: the table holds no more than those in use.
	deleteEndedUpstreamSessions = sql1(`DELETE FROM mcp_upstream_sessions WHERE expires_at <= $1`)

	// replaceUpstreamSession is the compare-and-swap of a record.
	replaceUpstreamSession = sql1(`
UPDATE mcp_upstream_sessions SET session = $3, protocol_version = $4, initialize_result = $5, created_at = $6, expires_at = $7
WHERE pool_key = $1 AND session = $2`)

	insertUpstreamSession = sql1(`
INSERT INTO mcp_upstream_sessions (` + upstreamSessionColumns + `) VALUES ($1, $2, $3, $4, $5, $6)`)

	getUpstreamSession = sql1(`SELECT ` + upstreamSessionColumns + ` FROM mcp_upstream_sessions WHERE pool_key = $1`)
)

func (c *core) PutUpstreamSession(ctx context.Context, s UpstreamSession, old string) (UpstreamSession, error) {
	if s.CreatedAt.IsZero() {
		s.CreatedAt = c.now()
	}
	s.CreatedAt, s.ExpiresAt = storedTime(s.CreatedAt), storedTime(s.ExpiresAt)
	if err := checkUpstreamSession(s); err != nil {
		return UpstreamSession{}, err
	}
	err := c.inTx(ctx, func(x executor) error {
		if _, err := x.exec(ctx, deleteEndedUpstreamSessions, s.CreatedAt); err != nil {
			return err
		}
		if old != "" {
			n, err := x.exec(ctx, replaceUpstreamSession, s.Key, old,
				s.Session, s.ProtocolVersion, string(s.InitializeResult), s.CreatedAt, s.ExpiresAt)
			if err != nil || n == 1 {
				return err
			}
		}
		// No record, or the one replaced has ended (and is gone): a
		// record there now is another's, and the insert conflicts.
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
	var s UpstreamSession
	var result string
	err := c.reader().row(ctx, getUpstreamSession, key).Scan(&s.Key, &s.Session, &s.ProtocolVersion, &result, at(&s.CreatedAt), at(&s.ExpiresAt))
	if err != nil {
		return UpstreamSession{}, c.fail(err)
	}
	s.InitializeResult = []byte(result)
	return s, nil
}
