-- Branches: editing a user message or regenerating a reply starts a new
-- line of the conversation beside the old one, which stays stored and
-- readable. Nothing of the log is rewritten: each event records the branch
-- it was appended on, and a branch's line is a chain of segments of the
-- branches before it.

-- +goose Up

-- active_branch is the branch the conversation goes on in (0, the
-- original line, until one is made); branch_count how many branches the
-- run has beyond it, which numbers the next.
ALTER TABLE runs
    ADD COLUMN active_branch bigint NOT NULL DEFAULT 0,
    ADD COLUMN branch_count  bigint NOT NULL DEFAULT 0;

-- branch is the run's active branch when the event was appended.
ALTER TABLE run_events ADD COLUMN branch bigint NOT NULL DEFAULT 0;

-- One row per branch beyond the original: forked from parent before the
-- parent's message fork_seq (the message it replaces), starting with its
-- own user message message_seq; kind says whether a person edited the
-- message or asked for the reply again; created_by is that person.
CREATE TABLE run_branches (
    run_id      text        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    branch      bigint      NOT NULL CHECK (branch > 0),
    parent      bigint      NOT NULL CHECK (parent >= 0 AND parent < branch),
    fork_seq    bigint      NOT NULL CHECK (fork_seq > 0),
    message_seq bigint      NOT NULL CHECK (message_seq > fork_seq),
    kind        text        NOT NULL CHECK (kind IN ('edit', 'regenerate')),
    created_by  text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (run_id, branch)
);

-- The line of each branch beyond the original: the events of member
-- with seq < until_seq (the branch's own row has the largest bigint). An
-- event of the run is on the line of branch when it is on one of these
-- segments; the original line is every event of branch 0.
CREATE TABLE run_branch_lines (
    run_id    text   NOT NULL,
    branch    bigint NOT NULL,
    member    bigint NOT NULL CHECK (member >= 0 AND member <= branch),
    until_seq bigint NOT NULL CHECK (until_seq > 0),
    PRIMARY KEY (run_id, branch, member),
    FOREIGN KEY (run_id, branch) REFERENCES run_branches (run_id, branch) ON DELETE CASCADE
);

-- A snapshot applies to the lines that share what it covers: it records
-- the branch it was written on, and each branch numbers its versions.
ALTER TABLE context_snapshots ADD COLUMN branch bigint NOT NULL DEFAULT 0 CHECK (branch >= 0);
ALTER TABLE context_snapshots
    DROP CONSTRAINT context_snapshots_pkey,
    ADD PRIMARY KEY (run_id, branch, version);

-- +goose Down
DELETE FROM context_snapshots WHERE branch <> 0;
ALTER TABLE context_snapshots
    DROP CONSTRAINT context_snapshots_pkey,
    ADD PRIMARY KEY (run_id, version);
ALTER TABLE context_snapshots DROP COLUMN branch;
DROP TABLE run_branch_lines;
DROP TABLE run_branches;
ALTER TABLE run_events DROP COLUMN branch;
ALTER TABLE runs DROP COLUMN branch_count, DROP COLUMN active_branch;
