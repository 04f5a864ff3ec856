-- The MCP session a replica holds for a run between its turns: which
-- replica (its id, as in leases) holds it, under which hold id, and, once
-- it is released, when and why. One row per run: a replica that holds the
-- run's session takes the row over, releasing another's hold. Every
-- release is a compare-and-swap on released_at, so that a hold is released
-- once whoever races to release it (the run's completion, cancellation or
-- deletion, its parking, the hold's idle time, a failed turn, a reaper).

-- +goose Up
CREATE TABLE held_sessions (
    run_id      TEXT NOT NULL PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    replica     TEXT NOT NULL,
    hold_id     TEXT NOT NULL,
    held_at     TEXT NOT NULL,
    released_at TEXT,
    reason      TEXT NOT NULL DEFAULT ''
) STRICT;

-- The holds of a replica, and of the replicas gone, not yet released.
CREATE INDEX held_sessions_replica_idx ON held_sessions (replica) WHERE released_at IS NULL;

-- +goose Down
DROP TABLE held_sessions;
