-- The decided approvals, newest first (ListDecidedApprovals): a
-- requester's own, and a tenant's, whose approver groups the query then
-- reads. The key is when an approval stopped being pending, which never
-- changes after.

-- +goose Up

CREATE INDEX approvals_principal_ended_idx ON approvals (principal, coalesce(decided_at, updated_at) DESC, id DESC)
    WHERE status <> 'pending';
CREATE INDEX approvals_tenant_ended_idx ON approvals (tenant, coalesce(decided_at, updated_at) DESC, id DESC)
    WHERE status <> 'pending';

-- +goose Down
DROP INDEX approvals_tenant_ended_idx;
DROP INDEX approvals_principal_ended_idx;
