-- Attachments: files people attach to their messages; the same logical
-- schema as on PostgreSQL. The content is stored once per owner under its
-- SHA-256 (attachment_contents: content-addressed, immutable, never shared
-- between owners). An attachment names one content with the name and
-- media type it was uploaded with; run_id is the conversation it was sent
-- in (NULL until a message references it). Deleting the run deletes its
-- attachments, and a content no attachment names any more goes with them.

-- +goose Up

CREATE TABLE attachment_contents (
    owner  TEXT    NOT NULL,
    sha256 TEXT    NOT NULL CHECK (length(sha256) = 64),
    size   INTEGER NOT NULL CHECK (size > 0),
    data   BLOB    NOT NULL,
    PRIMARY KEY (owner, sha256)
) STRICT;

CREATE TABLE attachments (
    id           TEXT    PRIMARY KEY,
    owner        TEXT    NOT NULL,
    tenant       TEXT    NOT NULL,
    run_id       TEXT    REFERENCES runs (id) ON DELETE CASCADE,
    sha256       TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    content_type TEXT    NOT NULL,
    size         INTEGER NOT NULL CHECK (size > 0),
    created_at   TEXT    NOT NULL,
    FOREIGN KEY (owner, sha256) REFERENCES attachment_contents (owner, sha256)
) STRICT;

CREATE INDEX attachments_content ON attachments (owner, sha256);
CREATE INDEX attachments_run ON attachments (run_id);
CREATE INDEX attachments_unsent ON attachments (created_at) WHERE run_id IS NULL;

-- +goose Down
DROP TABLE attachments;
DROP TABLE attachment_contents;
