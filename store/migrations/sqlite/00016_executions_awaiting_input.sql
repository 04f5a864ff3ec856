-- A tool call whose upstream asks its caller for input (multi round-trip
-- requests, protocol 2026-07-28) is one execution over several rounds:
-- between them it awaits input ('awaiting_input'), open but not running,
-- and the round that takes the caller's answers starts it again. The same
-- logical schema as on PostgreSQL; a CHECK constraint changes only by
-- rebuilding the table.

-- +goose Up

CREATE TABLE tool_executions_rounds (
    idempotency_key TEXT NOT NULL PRIMARY KEY,
    principal       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    arguments_hash  TEXT NOT NULL,
    approval_id     TEXT,
    run_id          TEXT,
    status          TEXT NOT NULL CHECK (status IN (
                             'started', 'awaiting_input', 'succeeded', 'failed', 'outcome_unknown')),
    result          TEXT CHECK (result IS NULL OR json_valid(result)),
    started_at      TEXT NOT NULL,
    finished_at     TEXT
) STRICT;
INSERT INTO tool_executions_rounds (idempotency_key, principal, tool, arguments_hash, approval_id, run_id, status, result, started_at, finished_at)
SELECT idempotency_key, principal, tool, arguments_hash, approval_id, run_id, status, result, started_at, finished_at FROM tool_executions;
DROP TABLE tool_executions;
ALTER TABLE tool_executions_rounds RENAME TO tool_executions;
CREATE INDEX tool_executions_started_idx ON tool_executions (started_at)
    WHERE status = 'started';

-- +goose Down
CREATE TABLE tool_executions_single (
    idempotency_key TEXT NOT NULL PRIMARY KEY,
    principal       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    arguments_hash  TEXT NOT NULL,
    approval_id     TEXT,
    run_id          TEXT,
    status          TEXT NOT NULL CHECK (status IN (
                             'started', 'succeeded', 'failed', 'outcome_unknown')),
    result          TEXT CHECK (result IS NULL OR json_valid(result)),
    started_at      TEXT NOT NULL,
    finished_at     TEXT
) STRICT;
INSERT INTO tool_executions_single (idempotency_key, principal, tool, arguments_hash, approval_id, run_id, status, result, started_at, finished_at)
SELECT idempotency_key, principal, tool, arguments_hash, approval_id, run_id,
       CASE status WHEN 'awaiting_input' THEN 'outcome_unknown' ELSE status END, result, started_at, finished_at FROM tool_executions;
DROP TABLE tool_executions;
ALTER TABLE tool_executions_single RENAME TO tool_executions;
CREATE INDEX tool_executions_started_idx ON tool_executions (started_at)
    WHERE status = 'started';
