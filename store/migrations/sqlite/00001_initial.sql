-- The initial schema: every table Usher's packages share, the same logical
-- schema as on PostgreSQL. Later migrations only add to it.
--
-- Tables are STRICT. Times are TEXT in UTC with exactly six fractional
-- digits ("2006-01-02T15:04:05.000000Z"), so text order is time order.
-- JSON is TEXT checked with json_valid.

-- +goose Up

-- A run is one conversation. The row holds what listings and the scheduler
-- need; the conversation itself is the run_events log.
CREATE TABLE runs (
    id               TEXT    NOT NULL PRIMARY KEY,
    owner            TEXT    NOT NULL,
    title            TEXT    NOT NULL DEFAULT '',
    status           TEXT    NOT NULL CHECK (status IN (
                                 'InProgress', 'AwaitingApproval', 'Idle',
                                 'Completed', 'Failed', 'Cancelled')),
    idempotency_key  TEXT,
    last_seq         INTEGER NOT NULL DEFAULT 0,
    message_count    INTEGER NOT NULL DEFAULT 0,
    preview          TEXT    NOT NULL DEFAULT '',
    -- Scheduling: queued_at is set while a turn waits; the lease names the
    -- process working the run and fencing_token only grows.
    queued_at        TEXT,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    fencing_token    INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL,
    last_activity_at TEXT    NOT NULL,
    completed_at     TEXT,
    deleted_at       TEXT,
    CONSTRAINT runs_owner_idempotency_key UNIQUE (owner, idempotency_key)
) STRICT;

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
-- from runs.last_seq inside the single writer's transaction.
CREATE TABLE run_events (
    run_id     TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL CHECK (seq > 0),
    type       TEXT    NOT NULL,
    payload    TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(payload)),
    created_at TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;

-- A human decision about one exact tool call.
CREATE TABLE approvals (
    id              TEXT NOT NULL PRIMARY KEY,
    principal       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    server          TEXT NOT NULL DEFAULT '',
    definition_hash TEXT NOT NULL,
    arguments_hash  TEXT NOT NULL,
    arguments       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(arguments)),
    policy_hash     TEXT NOT NULL,
    policy_ids      TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(policy_ids)),
    reason          TEXT NOT NULL DEFAULT '',
    run_id          TEXT REFERENCES runs (id) ON DELETE CASCADE,
    client_id       TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL CHECK (status IN (
                             'pending', 'approved', 'denied',
                             'expired', 'consumed', 'revoked')),
    decided_by      TEXT NOT NULL DEFAULT '',
    decision_reason TEXT NOT NULL DEFAULT '',
    decided_at      TEXT,
    consumed_at     TEXT,
    expires_at      TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
) STRICT;

-- At most one pending approval per exact call, so retries find the same
-- request instead of piling up new ones.
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
-- keys, because it outlives the rows they name.
CREATE TABLE audit_log (
    seq         INTEGER PRIMARY KEY CHECK (seq > 0),
    at          TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    principal   TEXT    NOT NULL DEFAULT '',
    client_id   TEXT    NOT NULL DEFAULT '',
    tool        TEXT    NOT NULL DEFAULT '',
    decision    TEXT    NOT NULL DEFAULT '',
    policy_ids  TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(policy_ids)),
    policy_hash TEXT    NOT NULL DEFAULT '',
    token_jti   TEXT    NOT NULL DEFAULT '',
    run_id      TEXT    NOT NULL DEFAULT '',
    approval_id TEXT    NOT NULL DEFAULT '',
    details     TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(details)),
    prev_hash   TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    CONSTRAINT audit_log_hash_key UNIQUE (hash)
) STRICT;

-- Asymmetric signing keys. private_key is sealed by its owner before it gets
-- here. generation is unique per purpose so racing rotations insert one key.
CREATE TABLE signing_keys (
    id              TEXT    NOT NULL PRIMARY KEY,
    purpose         TEXT    NOT NULL,
    generation      INTEGER NOT NULL CHECK (generation > 0),
    algorithm       TEXT    NOT NULL,
    public_key      BLOB    NOT NULL,
    private_key     BLOB    NOT NULL,
    created_at      TEXT    NOT NULL,
    signs_from      TEXT    NOT NULL,
    published_until TEXT    NOT NULL,
    CONSTRAINT signing_keys_purpose_generation_key UNIQUE (purpose, generation)
) STRICT;

-- The published key set of a purpose.
CREATE INDEX signing_keys_purpose_published_idx ON signing_keys (purpose, published_until);

-- +goose Down
DROP TABLE signing_keys;
DROP TABLE audit_log;
DROP TABLE approvals;
DROP TABLE run_events;
DROP TABLE runs;
