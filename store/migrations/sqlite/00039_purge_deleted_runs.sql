-- Erasing deleted conversations (assistant.purge_deleted_after): the sweep
-- finds the runs deleted before a time, and the results of their tool
-- calls. The first index holds the deleted runs only, the second the
-- calls a conversation made: an MCP client's call adds nothing to it.
-- Both are built in the migration's transaction.

-- +goose Up
CREATE INDEX runs_deleted_idx ON runs (deleted_at) WHERE deleted_at IS NOT NULL;
CREATE INDEX tool_executions_run_idx ON tool_executions (run_id) WHERE run_id IS NOT NULL;

-- +goose Down
DROP INDEX tool_executions_run_idx;
DROP INDEX runs_deleted_idx;
