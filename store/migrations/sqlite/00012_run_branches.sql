-- Branches: editing a user message or regenerating a reply starts a new
-- line of the conversation beside the old one, which stays stored and
-- readable; the same logical schema as on PostgreSQL. Nothing of the log
-- is rewritten: each event records the branch it was appended on.

-- +goose Up

-- active_branch is the branch the conversation goes on in (0, the
-- original line, until one is made); branch_count how many branches the
-- run has beyond it, which numbers the next.
ALTER TABLE runs ADD COLUMN active_branch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN branch_count INTEGER NOT NULL DEFAULT 0;

-- branch is the run's active branch when the event was appended.
ALTER TABLE run_events ADD COLUMN branch INTEGER NOT NULL DEFAULT 0;

-- One row per branch beyond the original: forked from parent before the
-- parent's message fork_seq (the message it replaces), starting with its
-- own user message message_seq; kind says whether a person edited the
-- message or asked for the reply again; created_by is that person.
CREATE TABLE run_branches (
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

-- The line of each branch beyond the original: the events of member
-- with seq < until_seq (the branch's own row has the largest integer). An
-- event of the run is on the line of branch when it is on one of these
-- segments; the original line is every event of branch 0.
CREATE TABLE run_branch_lines (
    run_id    TEXT    NOT NULL,
    branch    INTEGER NOT NULL,
    member    INTEGER NOT NULL CHECK (member >= 0 AND member <= branch),
    until_seq INTEGER NOT NULL CHECK (until_seq > 0),
    PRIMARY KEY (run_id, branch, member),
    FOREIGN KEY (run_id, branch) REFERENCES run_branches (run_id, branch) ON DELETE CASCADE
) STRICT;

-- A snapshot applies to the lines that share what it covers: it records
-- the branch it was written on, and each branch numbers its versions. A
-- primary key changes only by rebuilding the table.
CREATE TABLE context_snapshots_branched (
    run_id     TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    branch     INTEGER NOT NULL DEFAULT 0 CHECK (branch >= 0),
    version    INTEGER NOT NULL CHECK (version > 0),
    from_seq   INTEGER NOT NULL CHECK (from_seq > 0),
    to_seq     INTEGER NOT NULL CHECK (to_seq >= from_seq),
    summary    TEXT    NOT NULL,
    tokens     INTEGER NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    kind       TEXT    NOT NULL CHECK (kind IN ('automatic', 'manual')),
    model      TEXT    NOT NULL DEFAULT '',
    created_at TEXT    NOT NULL,
    PRIMARY KEY (run_id, branch, version)
) STRICT;
INSERT INTO context_snapshots_branched (run_id, branch, version, from_seq, to_seq, summary, tokens, kind, model, created_at)
SELECT run_id, 0, version, from_seq, to_seq, summary, tokens, kind, model, created_at FROM context_snapshots;
DROP TABLE context_snapshots;
ALTER TABLE context_snapshots_branched RENAME TO context_snapshots;

-- +goose Down
CREATE TABLE context_snapshots_unbranched (
    run_id     TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    version    INTEGER NOT NULL CHECK (version > 0),
    from_seq   INTEGER NOT NULL CHECK (from_seq > 0),
    to_seq     INTEGER NOT NULL CHECK (to_seq >= from_seq),
    summary    TEXT    NOT NULL,
    tokens     INTEGER NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    kind       TEXT    NOT NULL CHECK (kind IN ('automatic', 'manual')),
    model      TEXT    NOT NULL DEFAULT '',
    created_at TEXT    NOT NULL,
    PRIMARY KEY (run_id, version)
) STRICT;
INSERT INTO context_snapshots_unbranched (run_id, version, from_seq, to_seq, summary, tokens, kind, model, created_at)
SELECT run_id, version, from_seq, to_seq, summary, tokens, kind, model, created_at FROM context_snapshots WHERE branch = 0;
DROP TABLE context_snapshots;
ALTER TABLE context_snapshots_unbranched RENAME TO context_snapshots;
DROP TABLE run_branch_lines;
DROP TABLE run_branches;
ALTER TABLE run_events DROP COLUMN branch;
ALTER TABLE runs DROP COLUMN branch_count;
ALTER TABLE runs DROP COLUMN active_branch;
