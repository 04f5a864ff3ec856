-- Executions awaiting input, for the sweep that ends those no answer came
-- for (EndAwaitingInputAudited), found by index rather than by reading
-- every execution ever recorded each minute.

-- +goose Up

CREATE INDEX tool_executions_awaiting_idx ON tool_executions (started_at)
    WHERE status = 'awaiting_input';

-- +goose Down
DROP INDEX tool_executions_awaiting_idx;
