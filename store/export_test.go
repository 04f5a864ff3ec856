package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SetAuditLinger sets how long lazy audit appends of a PostgreSQL store
// wait to be carried (see appendAudit).
func SetAuditLinger(s Store, d time.Duration) {
	c := s.(*postgresStore).audit
	c.mu.Lock()
	c.linger = d
	c.mu.Unlock()
}

// QueuedAudit returns how many audit appends of a PostgreSQL store are
// queued.
func QueuedAudit(s Store) int {
	c := s.(*postgresStore).audit
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// AppendAuditAfter appends build's record on a PostgreSQL store after the
// statement stmt with args, in the same transaction, as BeginExecutionAudited
// does with its own.
func AppendAuditAfter(ctx context.Context, s Store, stmt string, args []any, build func(AuditHead) (AuditRecord, error), lazy bool) (AuditRecord, error) {
	step := &pgTxStep{
		queue: func(b *pgx.Batch) { b.Queue(stmt, args...) },
		read: func(br pgx.BatchResults) error {
			_, err := br.Exec()
			return err
		},
	}
	r, err := s.(*postgresStore).appendAudit(ctx, step, build, lazy)
	if err != nil {
		return AuditRecord{}, appendError(err, pgError)
	}
	return r, nil
}
