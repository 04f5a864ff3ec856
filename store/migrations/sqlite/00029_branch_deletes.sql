-- Deleting a message makes a branch too: the branch reads the line it
-- leaves without that message (and, for a user message, its answer). A
-- line's segment may then start after a cut: from_seq, when not 0, is the
-- first sequence of the member the segment holds, right after a message
-- the line leaves out. A member can hold several segments of one line,
-- told apart by where they end. The same logical schema as on PostgreSQL;
-- a CHECK or a primary key changes only by rebuilding the table.

-- +goose Up
CREATE TABLE run_branches_next (
    run_id      TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    branch      INTEGER NOT NULL CHECK (branch > 0),
    parent      INTEGER NOT NULL CHECK (parent >= 0 AND parent < branch),
    fork_seq    INTEGER NOT NULL CHECK (fork_seq > 0),
    message_seq INTEGER NOT NULL CHECK (message_seq > fork_seq),
    kind        TEXT    NOT NULL CHECK (kind IN ('edit', 'regenerate', 'delete')),
    created_by  TEXT    NOT NULL DEFAULT '',
    created_at  TEXT    NOT NULL,
    PRIMARY KEY (run_id, branch)
) STRICT;
INSERT INTO run_branches_next SELECT run_id, branch, parent, fork_seq, message_seq, kind, created_by, created_at FROM run_branches;

CREATE TABLE run_branch_lines_next (
    run_id    TEXT    NOT NULL,
    branch    INTEGER NOT NULL,
    member    INTEGER NOT NULL CHECK (member >= 0 AND member <= branch),
    until_seq INTEGER NOT NULL CHECK (until_seq > 0),
    from_seq  INTEGER NOT NULL DEFAULT 0 CHECK (from_seq >= 0),
    CHECK (from_seq < until_seq),
    PRIMARY KEY (run_id, branch, until_seq),
    FOREIGN KEY (run_id, branch) REFERENCES run_branches_next (run_id, branch) ON DELETE CASCADE
) STRICT;
INSERT INTO run_branch_lines_next (run_id, branch, member, until_seq) SELECT run_id, branch, member, until_seq FROM run_branch_lines;

DROP TABLE run_branch_lines;
DROP TABLE run_branches;
ALTER TABLE run_branches_next RENAME TO run_branches;
ALTER TABLE run_branch_lines_next RENAME TO run_branch_lines;

-- +goose Down
CREATE TABLE run_branches_prev (
    run_id      TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    branch      INTEGER NOT NULL CHECK (branch > 0),
    parent      INTEGER NOT NULL CHECK (parent >= 0 AND parent < branch),
    fork_seq    INTEGER NOT NULL CHECK (fork_seq > 0),
    message_seq INTEGER NOT NULL CHECK (message_seq > fork_seq),
    kind        TEXT    NOT NULL CHECK (kind IN ('edit', 'regenerate')),
    created_by  TEXT    NOT NULL DEFAULT '',
    created_at  TEXT    NOT NULL,
    PRIMARY KEY (run_id, branch)
) STRICT;
INSERT INTO run_branches_prev SELECT run_id, branch, parent, fork_seq, message_seq, kind, created_by, created_at
FROM run_branches WHERE kind <> 'delete';

CREATE TABLE run_branch_lines_prev (
    run_id    TEXT    NOT NULL,
    branch    INTEGER NOT NULL,
    member    INTEGER NOT NULL CHECK (member >= 0 AND member <= branch),
    until_seq INTEGER NOT NULL CHECK (until_seq > 0),
    PRIMARY KEY (run_id, branch, member),
    FOREIGN KEY (run_id, branch) REFERENCES run_branches_prev (run_id, branch) ON DELETE CASCADE
) STRICT;
INSERT INTO run_branch_lines_prev (run_id, branch, member, until_seq)
SELECT l.run_id, l.branch, l.member, max(l.until_seq) FROM run_branch_lines l
JOIN run_branches_prev b ON b.run_id = l.run_id AND b.branch = l.branch
GROUP BY l.run_id, l.branch, l.member;

DROP TABLE run_branch_lines;
DROP TABLE run_branches;
ALTER TABLE run_branches_prev RENAME TO run_branches;
ALTER TABLE run_branch_lines_prev RENAME TO run_branch_lines;
