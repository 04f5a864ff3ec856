-- A person's own settings and pinned conversations, keyed by their
-- principal id (issuer, tenant and object id, as runs.owner).
-- user_settings: custom instructions appended to the system prompt of
-- their new turns, the model new conversations start with ('' for the
-- deployment's default), the theme, and the key that sends a message.
-- run_pins: the runs they pinned to the top of their list; a pin goes with
-- its run.

-- +goose Up
CREATE TABLE user_settings (
    principal     text        PRIMARY KEY,
    instructions  text        NOT NULL DEFAULT '',
    default_model text        NOT NULL DEFAULT '',
    theme         text        NOT NULL DEFAULT 'system' CHECK (theme IN ('system', 'light', 'dark')),
    send_key      text        NOT NULL DEFAULT 'enter' CHECK (send_key IN ('enter', 'ctrl-enter')),
    updated_at    timestamptz NOT NULL
);

CREATE TABLE run_pins (
    principal text        NOT NULL,
    run_id    text        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    pinned_at timestamptz NOT NULL,
    PRIMARY KEY (principal, run_id)
);

-- +goose Down
DROP TABLE run_pins;
DROP TABLE user_settings;
