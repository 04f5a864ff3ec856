-- A check, under the audit lock, that the audit log's newest record is the
-- one a write was chained on. A process sends its next audit write before
-- the write ahead of it has committed, its records chained on the records
-- that write is to make; this check is what keeps the second from
-- committing when the first did not (rolled back, or overtaken by another
-- process's records), which would leave a gap or a broken link in the
-- chain. It raises SQLSTATE UA001, which rolls the second write back.
--
-- A function, not a statement with a conditional error: the planner may
-- evaluate a constant error branch before the condition.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION audit_head_is(want_seq bigint, want_hash text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    head_seq bigint;
    head_hash text;
BEGIN
    SELECT seq, hash INTO head_seq, head_hash FROM audit_log ORDER BY seq DESC LIMIT 1;
    IF NOT FOUND THEN
        head_seq := 0;
        head_hash := '';
    END IF;
    IF head_seq <> want_seq OR head_hash <> want_hash THEN
        RAISE EXCEPTION 'the audit log''s head is record %, not record % that this write was chained on', head_seq, want_seq
            USING ERRCODE = 'UA001';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION audit_head_is(bigint, text);
