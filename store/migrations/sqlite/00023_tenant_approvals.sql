-- Every approval of a tenant, newest first by creation, for security
-- reviewers (ListTenantApprovals).

-- +goose Up

CREATE INDEX approvals_tenant_created_idx ON approvals (tenant, created_at DESC, id DESC);

-- +goose Down
DROP INDEX approvals_tenant_created_idx;
