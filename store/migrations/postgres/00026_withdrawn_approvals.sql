-- An approval whose turn a person stopped is withdrawn: it can no longer
-- be decided nor used. A stopped turn's partial reply may still be kept,
-- once, by the process the stop fenced off: stopped_fence is its fencing
-- token.

-- +goose Up

ALTER TABLE approvals
    DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN (
        'pending', 'approved', 'denied', 'expired', 'consumed', 'revoked', 'withdrawn'));
ALTER TABLE runs ADD COLUMN stopped_fence bigint;

-- +goose Down
ALTER TABLE runs DROP COLUMN stopped_fence;
UPDATE approvals SET status = 'revoked' WHERE status = 'withdrawn';
ALTER TABLE approvals
    DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN (
        'pending', 'approved', 'denied', 'expired', 'consumed', 'revoked'));
