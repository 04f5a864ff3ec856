-- Approvals keep the requester's tenant: only members of the approver
-- groups in that tenant may see and decide them.

-- +goose Up

-- Requests made before this column existed belong to no tenant: no group
-- of a tenant may decide them, their requester still may.
ALTER TABLE approvals ADD COLUMN tenant TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE approvals DROP COLUMN tenant;
