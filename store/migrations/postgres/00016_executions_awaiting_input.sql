-- A tool call whose upstream asks its caller for input (multi round-trip
-- requests, protocol 2026-07-28) is one execution over several rounds:
-- between them it awaits input ('awaiting_input'), open but not running,
-- and the round that takes the caller's answers starts it again.

-- +goose Up

ALTER TABLE tool_executions
    DROP CONSTRAINT tool_executions_status_check,
    ADD CONSTRAINT tool_executions_status_check CHECK (status IN (
        'started', 'awaiting_input', 'succeeded', 'failed', 'outcome_unknown'));

-- +goose Down
UPDATE tool_executions SET status = 'outcome_unknown' WHERE status = 'awaiting_input';
ALTER TABLE tool_executions
    DROP CONSTRAINT tool_executions_status_check,
    ADD CONSTRAINT tool_executions_status_check CHECK (status IN (
        'started', 'succeeded', 'failed', 'outcome_unknown'));
