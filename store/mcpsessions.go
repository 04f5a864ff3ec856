package store

import (
	"context"
	"errors"
	"time"
)

// MaxMCPSessionState bounds an MCPSession's State: the handshake of one
// client, its capabilities and information, with room to spare.
const MaxMCPSessionState = 64 << 10

// MCPSession is a stateful session of the MCP endpoint, kept in the
// database so that any replica can serve its requests: the replica that
// meets a session it does not hold restores it from this record.
type MCPSession struct {
	// ID is the session's id: the key, which the session's sealed
	// Mcp-Session-Id names.
	ID string
	// Principal is the principal id the session belongs to; no one else's
	// request may use it.
	Principal string
	// State is the session's state as the MCP server encodes it (JSON):
	// the protocol version, the client's capabilities and information, the
	// log level. At most MaxMCPSessionState bytes.
	State     []byte
	CreatedAt time.Time
	// ExpiresAt is when the session ends, whatever happens before.
	ExpiresAt time.Time
}

// Active reports whether the session may still be used at now.
func (s MCPSession) Active(now time.Time) bool { return now.Before(s.ExpiresAt) }

// mcpSessionColumns is the column list of an MCPSession, in field order.
const mcpSessionColumns = `id, principal, state, created_at, expires_at`

// checkMCPSession validates a session CreateMCPSession writes.
func checkMCPSession(s MCPSession) error {
	var errs []error
	if s.ID == "" {
		errs = append(errs, errors.New("MCP session ID is empty"))
	}
	if s.Principal == "" {
		errs = append(errs, errors.New("MCP session principal is empty"))
	}
	if s.ExpiresAt.IsZero() {
		errs = append(errs, errors.New("MCP session ExpiresAt is zero"))
	} else if !s.ExpiresAt.After(s.CreatedAt) {
		errs = append(errs, errors.New("MCP session ExpiresAt is not after CreatedAt"))
	}
	errs = append(errs,
		checkMCPSessionState(s.State),
		checkText("MCP session ID", s.ID),
		checkText("MCP session principal", s.Principal),
		checkTime("MCP session CreatedAt", s.CreatedAt),
		checkTime("MCP session ExpiresAt", s.ExpiresAt))
	return invalid(errs...)
}

// checkMCPSessionState validates a session's state.
func checkMCPSessionState(state []byte) error {
	switch {
	case len(state) == 0:
		return errors.New("MCP session state is empty")
	case len(state) > MaxMCPSessionState:
		return errors.New("MCP session state is larger than MaxMCPSessionState")
	}
	return checkText("MCP session state", string(state))
}

var (
	// insertMCPSession deletes the sessions that have ended first: the
	// table holds no more than the sessions in use.
	deleteEndedMCPSessions = sql1(`DELETE FROM mcp_sessions WHERE expires_at <= $1`)

	insertMCPSession = sql1(`
INSERT INTO mcp_sessions (id, principal, state, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)
RETURNING ` + mcpSessionColumns)

	getMCPSession = sql1(`SELECT ` + mcpSessionColumns + ` FROM mcp_sessions WHERE id = $1`)

	// updateMCPSessionState is a compare-and-swap on the state.
	updateMCPSessionState = sql1(`UPDATE mcp_sessions SET state = $3 WHERE id = $1 AND state = $2`)

	deleteMCPSession = sql1(`DELETE FROM mcp_sessions WHERE id = $1`)
)

func (c *core) CreateMCPSession(ctx context.Context, s MCPSession) (MCPSession, error) {
	if s.CreatedAt.IsZero() {
		s.CreatedAt = c.now()
	}
	if err := checkMCPSession(s); err != nil {
		return MCPSession{}, err
	}
	var out MCPSession
	err := c.inTx(ctx, func(x executor) error {
		if _, err := x.exec(ctx, deleteEndedMCPSessions, storedTime(s.CreatedAt)); err != nil {
			return err
		}
		var err error
		out, err = scanMCPSession(x.row(ctx, insertMCPSession,
			s.ID, s.Principal, string(s.State), storedTime(s.CreatedAt), storedTime(s.ExpiresAt)))
		return err
	})
	if err != nil {
		return MCPSession{}, c.fail(err)
	}
	return out, nil
}

func (c *core) GetMCPSession(ctx context.Context, id string) (MCPSession, error) {
	out, err := scanMCPSession(c.reader().row(ctx, getMCPSession, id))
	if err != nil {
		return MCPSession{}, c.fail(err)
	}
	return out, nil
}

func (c *core) UpdateMCPSessionState(ctx context.Context, id string, old, state []byte) error {
	if err := invalid(checkMCPSessionState(state)); err != nil {
		return err
	}
	return c.fail(c.writeOne(ctx, func(x executor) error {
		n, err := x.exec(ctx, updateMCPSessionState, id, string(old), string(state))
		if err == nil && n == 0 {
			err = ErrConflict
		}
		return err
	}))
}

func (c *core) DeleteMCPSession(ctx context.Context, id string) error {
	return c.fail(c.writeOne(ctx, func(x executor) error {
		n, err := x.exec(ctx, deleteMCPSession, id)
		if err == nil && n == 0 {
			err = ErrNotFound
		}
		return err
	}))
}

// scanMCPSession reads one row of mcpSessionColumns.
func scanMCPSession(row rowScanner) (MCPSession, error) {
	var s MCPSession
	var state string
	err := row.Scan(&s.ID, &s.Principal, &state, at(&s.CreatedAt), at(&s.ExpiresAt))
	s.State = []byte(state)
	return s, err
}
