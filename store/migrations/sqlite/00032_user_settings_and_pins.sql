-- A person's own settings and pinned conversations, keyed by their
-- principal id (issuer, tenant and object id, as runs.owner); the same
-- logical schema as on PostgreSQL. user_settings: custom instructions
-- appended to the system prompt of their new turns, the model new
-- conversations start with ('' for the deployment's default), the theme,
-- and the key that sends a message. run_pins: the runs they pinned to the
-- top of their list; a pin goes with its run.

-- +goose Up
CREATE TABLE user_settings (
    principal     TEXT NOT NULL PRIMARY KEY,
    instructions  TEXT NOT NULL DEFAULT '',
    default_model TEXT NOT NULL DEFAULT '',
    theme         TEXT NOT NULL DEFAULT 'system' CHECK (theme IN ('system', 'light', 'dark')),
    send_key      TEXT NOT NULL DEFAULT 'enter' CHECK (send_key IN ('enter', 'ctrl-enter')),
    updated_at    TEXT NOT NULL
) STRICT;

CREATE TABLE run_pins (
    principal TEXT NOT NULL,
    run_id    TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    pinned_at TEXT NOT NULL,
    PRIMARY KEY (principal, run_id)
) STRICT;

-- +goose Down
DROP TABLE run_pins;
DROP TABLE user_settings;
