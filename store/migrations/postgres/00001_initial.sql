-- The initial schema: every table Usher's packages share. Later migrations
-- only add to it, so a replica running the previous release keeps working
-- while a newer one migrates.

-- +goose Up

-- A run is one conversation. The row holds what listings and the scheduler
-- need; the conversation itself is the run_events log.
CREATE TABLE runs (
    id               text        PRIMARY KEY,
    owner            text        NOT NULL,
    title            text        NOT NULL DEFAULT '',
    status           text        NOT NULL CHECK (status IN (
                                     'InProgress', 'AwaitingApproval', 'Idle',
                                     'Completed', 'Failed', 'Cancelled')),
    idempotency_key  text,
    last_seq         bigint      NOT NULL DEFAULT 0,
    message_count    integer     NOT NULL DEFAULT 0,
    preview          text        NOT NULL DEFAULT '',
    -- Scheduling: queued_at is set while a turn waits; the lease names the
    -- replica working the run and fencing_token only grows.
    queued_at        timestamptz,
    lease_owner      text,
    lease_expires_at timestamptz,
    fencing_token    bigint      NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    last_activity_at timestamptz NOT NULL,
    completed_at     timestamptz,
    deleted_at       timestamptz,
    CONSTRAINT runs_owner_idempotency_key UNIQUE (owner, idempotency_key)
);

-- An owner's runs, newest first.
CREATE INDEX runs_owner_created_idx ON runs (owner, created_at DESC, id DESC);
-- Counting an owner's active runs.
CREATE INDEX runs_owner_status_idx ON runs (owner, status);
-- Sweeps over every run in one status (quiet runs to Idle, say).
CREATE INDEX runs_status_idx ON runs (status);
-- The scheduler's claim: runs whose turn waits, oldest first...
CREATE INDEX runs_queued_idx ON runs (queued_at) WHERE queued_at IS NOT NULL;
-- ...and leases that expired, to take over.
CREATE INDEX runs_lease_expiry_idx ON runs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- The append-only event log of a run. seq is gapless per run: it is taken
-- from runs.last_seq under the run's row lock.
CREATE TABLE run_events (
    run_id     text        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq        bigint      NOT NULL CHECK (seq > 0),
    type       text        NOT NULL,
    payload    jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- A human decision about one exact tool call. The JSON columns are json, not
-- jsonb, so what was bound is read back byte for byte.
CREATE TABLE approvals (
    id              text        PRIMARY KEY,
    principal       text        NOT NULL,
    tool            text        NOT NULL,
    server          text        NOT NULL DEFAULT '',
    definition_hash text        NOT NULL,
    arguments_hash  text        NOT NULL,
    arguments       json        NOT NULL DEFAULT '{}',
    policy_hash     text        NOT NULL,
    policy_ids      json        NOT NULL DEFAULT '[]',
    reason          text        NOT NULL DEFAULT '',
    run_id          text        REFERENCES runs (id) ON DELETE CASCADE,
    client_id       text        NOT NULL DEFAULT '',
    status          text        NOT NULL CHECK (status IN (
                                    'pending', 'approved', 'denied',
                                    'expired', 'consumed', 'revoked')),
    decided_by      text        NOT NULL DEFAULT '',
    decision_reason text        NOT NULL DEFAULT '',
    decided_at      timestamptz,
    consumed_at     timestamptz,
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

-- At most one pending approval per exact call, so retries and replicas find
-- the same request instead of piling up new ones.
CREATE UNIQUE INDEX approvals_pending_binding_key ON approvals (
    principal, tool, server, definition_hash, arguments_hash, policy_hash,
    coalesce(run_id, ''), client_id
) WHERE status = 'pending';
-- A principal's approvals by status (the pending list), oldest first.
CREATE INDEX approvals_principal_status_idx ON approvals (principal, status, created_at);
-- Pending approvals by deadline, for the expiry sweep.
CREATE INDEX approvals_pending_expiry_idx ON approvals (expires_at) WHERE status = 'pending';
-- Approvals of a run (and the cascade when a run is purged).
CREATE INDEX approvals_run_idx ON approvals (run_id) WHERE run_id IS NOT NULL;

-- The tamper-evident audit log: seq is global and gapless, hash chains each
-- entry to prev_hash. It keeps identifiers as plain text, without foreign
-- keys, because it outlives the rows they name. The JSON columns are json,
-- not jsonb, so the hashed bytes are read back unchanged.
CREATE TABLE audit_log (
    seq         bigint      PRIMARY KEY CHECK (seq > 0),
    at          timestamptz NOT NULL,
    kind        text        NOT NULL,
    principal   text        NOT NULL DEFAULT '',
    client_id   text        NOT NULL DEFAULT '',
    tool        text        NOT NULL DEFAULT '',
    decision    text        NOT NULL DEFAULT '',
    policy_ids  json        NOT NULL DEFAULT '[]',
    policy_hash text        NOT NULL DEFAULT '',
    token_jti   text        NOT NULL DEFAULT '',
    run_id      text        NOT NULL DEFAULT '',
    approval_id text        NOT NULL DEFAULT '',
    details     json        NOT NULL DEFAULT '{}',
    prev_hash   text        NOT NULL,
    hash        text        NOT NULL,
    CONSTRAINT audit_log_hash_key UNIQUE (hash)
);

-- Asymmetric signing keys. private_key is sealed by its owner before it gets
-- here. generation is unique per purpose so racing rotations insert one key.
CREATE TABLE signing_keys (
    id              text        PRIMARY KEY,
    purpose         text        NOT NULL,
    generation      bigint      NOT NULL CHECK (generation > 0),
    algorithm       text        NOT NULL,
    public_key      bytea       NOT NULL,
    private_key     bytea       NOT NULL,
    created_at      timestamptz NOT NULL,
    signs_from      timestamptz NOT NULL,
    published_until timestamptz NOT NULL,
    CONSTRAINT signing_keys_purpose_generation_key UNIQUE (purpose, generation)
);

-- The published key set of a purpose.
CREATE INDEX signing_keys_purpose_published_idx ON signing_keys (purpose, published_until);

-- +goose Down
DROP TABLE signing_keys;
DROP TABLE audit_log;
DROP TABLE approvals;
DROP TABLE run_events;
DROP TABLE runs;
