-- Legal holds: the people whose data must be kept (a lawsuit, an
-- investigation), one row each. While a person's hold stands nothing
-- erases their data: the retention purge skips their deleted
-- conversations, deleting a conversation keeps its attachments until that
-- purge, and erasing the person is refused.

-- +goose Up
CREATE TABLE legal_holds (
    principal text        PRIMARY KEY,
    reason    text        NOT NULL,
    placed_by text        NOT NULL,
    placed_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE legal_holds;
