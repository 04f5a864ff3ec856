-- An approval whose turn a person stopped is withdrawn: it can no longer
-- be decided nor used. A stopped turn's partial reply may still be kept,
-- once, by the process the stop fenced off: stopped_fence is its fencing
-- token. The same logical schema as on PostgreSQL; a CHECK
-- constraint changes only by rebuilding the table (nothing refers to it),
-- and with it its indexes.

-- +goose Up

ALTER TABLE runs ADD COLUMN stopped_fence INTEGER;
CREATE TABLE approvals_withdrawn (
    id              TEXT NOT NULL PRIMARY KEY,
    principal       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    server          TEXT NOT NULL DEFAULT '',
    definition_hash TEXT NOT NULL,
    arguments_hash  TEXT NOT NULL,
    arguments       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(arguments)),
    policy_hash     TEXT NOT NULL,
    policy_ids      TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(policy_ids)),
    reason          TEXT NOT NULL DEFAULT '',
    run_id          TEXT REFERENCES runs (id) ON DELETE CASCADE,
    client_id       TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL CHECK (status IN (
                             'pending', 'approved', 'denied',
                             'expired', 'consumed', 'revoked',
                             'withdrawn')),
    decided_by      TEXT NOT NULL DEFAULT '',
    decision_reason TEXT NOT NULL DEFAULT '',
    decided_at      TEXT,
    consumed_at     TEXT,
    expires_at      TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    approvers       TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(approvers)),
    tool_call_id    TEXT,
    idempotency_key TEXT,
    tenant          TEXT NOT NULL DEFAULT ''
) STRICT;
INSERT INTO approvals_withdrawn (id, principal, tool, server, definition_hash, arguments_hash, arguments, policy_hash, policy_ids, reason, run_id, client_id, status, decided_by, decision_reason, decided_at, consumed_at, expires_at, created_at, updated_at, approvers, tool_call_id, idempotency_key, tenant)
SELECT id, principal, tool, server, definition_hash, arguments_hash, arguments, policy_hash, policy_ids, reason, run_id, client_id, status, decided_by, decision_reason, decided_at, consumed_at, expires_at, created_at, updated_at, approvers, tool_call_id, idempotency_key, tenant FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_withdrawn RENAME TO approvals;
CREATE UNIQUE INDEX approvals_pending_binding_key ON approvals (
    principal, tool, server, definition_hash, arguments_hash, policy_hash,
    coalesce(run_id, ''), client_id
) WHERE status = 'pending';
CREATE INDEX approvals_principal_status_idx ON approvals (principal, status, created_at);
CREATE INDEX approvals_pending_expiry_idx ON approvals (expires_at) WHERE status = 'pending';
CREATE INDEX approvals_run_idx ON approvals (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX approvals_approved_call_idx ON approvals (principal, tool, arguments_hash)
    WHERE status = 'approved';
CREATE INDEX approvals_open_tool_idx ON approvals (tool)
    WHERE status IN ('pending', 'approved');
CREATE INDEX approvals_open_expiry_idx ON approvals (expires_at)
    WHERE status IN ('pending', 'approved');
CREATE INDEX approvals_principal_ended_idx ON approvals (principal, coalesce(decided_at, updated_at) DESC, id DESC)
    WHERE status <> 'pending';
CREATE INDEX approvals_tenant_ended_idx ON approvals (tenant, coalesce(decided_at, updated_at) DESC, id DESC)
    WHERE status <> 'pending';
CREATE INDEX approvals_tenant_created_idx ON approvals (tenant, created_at DESC, id DESC);

-- +goose Down
ALTER TABLE runs DROP COLUMN stopped_fence;
CREATE TABLE approvals_six (
    id              TEXT NOT NULL PRIMARY KEY,
    principal       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    server          TEXT NOT NULL DEFAULT '',
    definition_hash TEXT NOT NULL,
    arguments_hash  TEXT NOT NULL,
    arguments       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(arguments)),
    policy_hash     TEXT NOT NULL,
    policy_ids      TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(policy_ids)),
    reason          TEXT NOT NULL DEFAULT '',
    run_id          TEXT REFERENCES runs (id) ON DELETE CASCADE,
    client_id       TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL CHECK (status IN (
                             'pending', 'approved', 'denied',
                             'expired', 'consumed', 'revoked')),
    decided_by      TEXT NOT NULL DEFAULT '',
    decision_reason TEXT NOT NULL DEFAULT '',
    decided_at      TEXT,
    consumed_at     TEXT,
    expires_at      TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    approvers       TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(approvers)),
    tool_call_id    TEXT,
    idempotency_key TEXT,
    tenant          TEXT NOT NULL DEFAULT ''
) STRICT;
INSERT INTO approvals_six (id, principal, tool, server, definition_hash, arguments_hash, arguments, policy_hash, policy_ids, reason, run_id, client_id, status, decided_by, decision_reason, decided_at, consumed_at, expires_at, created_at, updated_at, approvers, tool_call_id, idempotency_key, tenant)
SELECT id, principal, tool, server, definition_hash, arguments_hash, arguments, policy_hash, policy_ids, reason, run_id, client_id, CASE status WHEN 'withdrawn' THEN 'revoked' ELSE status END, decided_by, decision_reason, decided_at, consumed_at, expires_at, created_at, updated_at, approvers, tool_call_id, idempotency_key, tenant FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_six RENAME TO approvals;
CREATE UNIQUE INDEX approvals_pending_binding_key ON approvals (
    principal, tool, server, definition_hash, arguments_hash, policy_hash,
    coalesce(run_id, ''), client_id
) WHERE status = 'pending';
CREATE INDEX approvals_principal_status_idx ON approvals (principal, status, created_at);
CREATE INDEX approvals_pending_expiry_idx ON approvals (expires_at) WHERE status = 'pending';
CREATE INDEX approvals_run_idx ON approvals (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX approvals_approved_call_idx ON approvals (principal, tool, arguments_hash)
    WHERE status = 'approved';
CREATE INDEX approvals_open_tool_idx ON approvals (tool)
    WHERE status IN ('pending', 'approved');
CREATE INDEX approvals_open_expiry_idx ON approvals (expires_at)
    WHERE status IN ('pending', 'approved');
CREATE INDEX approvals_principal_ended_idx ON approvals (principal, coalesce(decided_at, updated_at) DESC, id DESC)
    WHERE status <> 'pending';
CREATE INDEX approvals_tenant_ended_idx ON approvals (tenant, coalesce(decided_at, updated_at) DESC, id DESC)
    WHERE status <> 'pending';
CREATE INDEX approvals_tenant_created_idx ON approvals (tenant, created_at DESC, id DESC);
