-- Attachments: files people attach to their messages. The content is
-- stored once per owner under its SHA-256 (attachment_contents: content-
-- addressed, immutable, never shared between owners, so that no one
-- learns from an upload whether another person holds the same file). An
-- attachment names one content with the name and media type it was
-- uploaded with; run_id is the conversation it was sent in (NULL until a
-- message references it). Deleting the run deletes its attachments, and
-- a content no attachment names any more goes with them.

-- +goose Up

CREATE TABLE attachment_contents (
    owner  text   NOT NULL,
    sha256 text   NOT NULL CHECK (length(sha256) = 64),
    size   bigint NOT NULL CHECK (size > 0),
    data   bytea  NOT NULL,
    PRIMARY KEY (owner, sha256)
);

CREATE TABLE attachments (
    id           text        PRIMARY KEY,
    owner        text        NOT NULL,
    tenant       text        NOT NULL,
    run_id       text        REFERENCES runs (id) ON DELETE CASCADE,
    sha256       text        NOT NULL,
    name         text        NOT NULL,
    content_type text        NOT NULL,
    size         bigint      NOT NULL CHECK (size > 0),
    created_at   timestamptz NOT NULL,
    FOREIGN KEY (owner, sha256) REFERENCES attachment_contents (owner, sha256)
);

CREATE INDEX attachments_content ON attachments (owner, sha256);
CREATE INDEX attachments_run ON attachments (run_id);
CREATE INDEX attachments_unsent ON attachments (created_at) WHERE run_id IS NULL;

-- +goose Down
DROP TABLE attachments;
DROP TABLE attachment_contents;
