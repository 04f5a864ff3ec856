-- Deleting a message makes a branch too: the branch reads the line it
-- leaves without that message (and, for a user message, its answer). A
-- line's segment may then start after a cut: from_seq, when not 0, is the
-- first sequence of the member the segment holds, right after a message
-- the line leaves out. A member can hold several segments of one line,
-- told apart by where they end.

-- +goose Up
ALTER TABLE run_branches DROP CONSTRAINT run_branches_kind_check,
    ADD CONSTRAINT run_branches_kind_check CHECK (kind IN ('edit', 'regenerate', 'delete'));

ALTER TABLE run_branch_lines ADD COLUMN from_seq bigint NOT NULL DEFAULT 0 CHECK (from_seq >= 0),
    ADD CONSTRAINT run_branch_lines_range_check CHECK (from_seq < until_seq),
    DROP CONSTRAINT run_branch_lines_pkey,
    ADD PRIMARY KEY (run_id, branch, until_seq);

-- +goose Down
DELETE FROM run_branches WHERE kind = 'delete';
DELETE FROM run_branch_lines l WHERE EXISTS (SELECT 1 FROM run_branch_lines o
    WHERE o.run_id = l.run_id AND o.branch = l.branch AND o.member = l.member AND o.until_seq > l.until_seq);
ALTER TABLE run_branch_lines DROP CONSTRAINT run_branch_lines_pkey,
    ADD PRIMARY KEY (run_id, branch, member),
    DROP COLUMN from_seq;
ALTER TABLE run_branches DROP CONSTRAINT run_branches_kind_check,
    ADD CONSTRAINT run_branches_kind_check CHECK (kind IN ('edit', 'regenerate'));
