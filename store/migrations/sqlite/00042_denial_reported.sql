-- denial_reported_at: when a denied approval answered a retry of its call
-- from an MCP client: the first identical call after the denial is told
-- of it, once, and the next asks for a new approval. NULL for a denial
-- not yet reported. Denials decided before are taken to have been
-- reported: a client learns of no denial older than this column.

-- +goose Up
ALTER TABLE approvals ADD COLUMN denial_reported_at TEXT;
UPDATE approvals SET denial_reported_at = decided_at WHERE status = 'denied';

-- +goose Down
ALTER TABLE approvals DROP COLUMN denial_reported_at;
