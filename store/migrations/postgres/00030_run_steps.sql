-- The steps of a run: one durable record per slice of work, numbered from
-- 1 per run. (run_id, sequence) is the step's key, the idempotency key
-- run:{run_id}:step:{sequence}: a slice whose process died is continued
-- by the next slice under the same sequence (attempts counts the leases
-- that worked it), never recorded twice. fencing_token is the lease of the
-- slice that holds the step. A step is open until ended_at and outcome
-- are set; the counts are the model steps and tool calls its slice made.

-- +goose Up

CREATE TABLE run_steps (
    run_id        text        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    sequence      bigint      NOT NULL CHECK (sequence > 0),
    kind          text        NOT NULL CHECK (kind IN ('turn', 'resume')),
    message_seq   bigint      NOT NULL,
    fencing_token bigint      NOT NULL,
    attempts      bigint      NOT NULL DEFAULT 1,
    started_at    timestamptz NOT NULL,
    ended_at      timestamptz,
    outcome       text        CHECK (outcome IN (
                                  'ended', 'yielded', 'paused', 'failed',
                                  'interrupted', 'stopped', 'closed')),
    model_steps   bigint      NOT NULL DEFAULT 0,
    tool_calls    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, sequence),
    CHECK ((ended_at IS NULL) = (outcome IS NULL))
);

-- +goose Down
DROP TABLE run_steps;
