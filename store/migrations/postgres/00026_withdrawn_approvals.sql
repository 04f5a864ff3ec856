-- An approval whose turn a person stopped is withdrawn: it can no longer
-- be decided nor used.

-- +goose Up

ALTER TABLE approvals
    DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN (
        'pending', 'approved', 'denied', 'expired', 'consumed', 'revoked', 'withdrawn'));

-- +goose Down
UPDATE approvals SET status = 'revoked' WHERE status = 'withdrawn';
ALTER TABLE approvals
    DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN (
        'pending', 'approved', 'denied', 'expired', 'consumed', 'revoked'));
