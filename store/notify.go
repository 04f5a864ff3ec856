package store

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// wakeHub fans wake-ups out to this process's subscribers. Each subscriber
// has a channel of one slot, so wake-ups coalesce and a slow subscriber
// never blocks a writer.
type wakeHub struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// subscribe returns a channel that wakes until ctx ends, then closes.
func (h *wakeHub) subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[chan struct{}]struct{})
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		close(ch)
		h.mu.Unlock()
	})
	return ch
}

// wake signals every subscriber.
func (h *wakeHub) wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *sqliteStore) WakeUps(ctx context.Context) (<-chan struct{}, error) {
	return s.wakes.subscribe(ctx), nil
}

// pgListenRetry is how long the listener waits before it reconnects.
const pgListenRetry = time.Second

// WakeUps listens on the schema's queue channel on a connection of its own,
// outside the pool. When the connection fails it reconnects and wakes the
// subscriber, which may have missed a notification meanwhile.
func (s *postgresStore) WakeUps(ctx context.Context) (<-chan struct{}, error) {
	conn, err := s.listenOn(ctx, pgQueueChannel)
	if err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer func() {
			if conn != nil {
				closeConn(conn)
			}
		}()
		wake := func() {
			select {
			case out <- struct{}{}:
			default:
			}
		}
		for {
			if conn == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(pgListenRetry):
				}
				if conn, err = s.listenOn(ctx, pgQueueChannel); err != nil {
					s.log.WarnContext(ctx, "store: reconnecting the queue listener failed", "err", err)
					conn = nil
					continue
				}
				wake()
			}
			if _, err := conn.WaitForNotification(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.WarnContext(ctx, "store: the queue listener lost its connection", "err", err)
				closeConn(conn)
				conn = nil
				continue
			}
			wake()
		}
	}()
	return out, nil
}

// pgQueueChannel names the schema's queue channel.
const pgQueueChannel = `SELECT 'usher_queue.' || current_schema()`

// listenOn opens a connection outside the pool that listens on the channel
// channelQuery names (it is evaluated on that connection, so that the
// channel follows the connection's schema).
func (s *postgresStore) listenOn(ctx context.Context, channelQuery string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return nil, pgError(err)
	}
	var channel string
	if err := conn.QueryRow(ctx, channelQuery).Scan(&channel); err != nil {
		closeConn(conn)
		return nil, pgError(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, pgError(err)
	}
	return conn, nil
}

// closeConn closes a listener connection within a bounded time.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := conn.Close(ctx); err != nil {
		slog.Debug("store: closing the listener connection", "err", err)
	}
}
