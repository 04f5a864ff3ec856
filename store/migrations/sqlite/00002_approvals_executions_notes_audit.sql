-- What the approval flow, the idempotent execution of tool calls, the demo
-- tools and the audit log need beyond the initial schema; the same logical
-- schema as on PostgreSQL.

-- +goose Up

-- Approvals name the groups allowed to decide them (empty: the requester
-- decides), and remember which tool call asked, for the retry.
ALTER TABLE approvals ADD COLUMN approvers TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(approvers));
ALTER TABLE approvals ADD COLUMN tool_call_id TEXT;
ALTER TABLE approvals ADD COLUMN idempotency_key TEXT;

-- The approved, unconsumed approval a retried call looks for.
CREATE INDEX approvals_approved_call_idx ON approvals (principal, tool, arguments_hash)
    WHERE status = 'approved';
-- Open approvals by tool, for the revocation when a definition changes...
CREATE INDEX approvals_open_tool_idx ON approvals (tool)
    WHERE status IN ('pending', 'approved');
-- ...and by deadline, for the expiry sweep.
CREATE INDEX approvals_open_expiry_idx ON approvals (expires_at)
    WHERE status IN ('pending', 'approved');

-- One row per idempotency key: a tool call runs at most once. A row left
-- 'started' by a process that died is marked 'outcome_unknown' and
-- reported, never run again. Identifiers are plain text, like the audit
-- log's: the ledger outlives the rows they name.
CREATE TABLE tool_executions (
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

-- Executions still running, for the sweep that finds abandoned ones.
CREATE INDEX tool_executions_started_idx ON tool_executions (started_at)
    WHERE status = 'started';

-- The demo toolset's notes, per user.
CREATE TABLE notes (
    owner      TEXT NOT NULL,
    name       TEXT NOT NULL,
    body       TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (owner, name)
) STRICT;

-- The rest of what an audit entry records about a call.
ALTER TABLE audit_log ADD COLUMN definition_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN arguments_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN outcome TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN latency_us INTEGER NOT NULL DEFAULT 0 CHECK (latency_us >= 0);

-- +goose Down
ALTER TABLE audit_log DROP COLUMN latency_us;
ALTER TABLE audit_log DROP COLUMN outcome;
ALTER TABLE audit_log DROP COLUMN arguments_hash;
ALTER TABLE audit_log DROP COLUMN definition_hash;
DROP TABLE notes;
DROP TABLE tool_executions;
DROP INDEX approvals_open_expiry_idx;
DROP INDEX approvals_open_tool_idx;
DROP INDEX approvals_approved_call_idx;
ALTER TABLE approvals DROP COLUMN idempotency_key;
ALTER TABLE approvals DROP COLUMN tool_call_id;
ALTER TABLE approvals DROP COLUMN approvers;
