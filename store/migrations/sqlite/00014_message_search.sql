-- Message search: the words of users' and the assistant's messages,
-- indexed for full-text search (Store.SearchMessages). PostgreSQL indexes
-- the content of the events themselves; SQLite keeps an FTS5 table beside
-- them, filled by a trigger as messages are appended (and here, with the
-- messages already stored).

-- +goose Up
-- The tokenizer keeps diacritics, as PostgreSQL's 'simple' configuration
-- does: both fold case only.
CREATE VIRTUAL TABLE run_search USING fts5(
    content, run_id UNINDEXED, seq UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 0'
);

INSERT INTO run_search (content, run_id, seq)
SELECT json_extract(payload, '$.content'), run_id, seq FROM run_events
WHERE type IN ('message.user', 'message.assistant') AND coalesce(json_extract(payload, '$.content'), '') <> '';

-- +goose StatementBegin
CREATE TRIGGER run_search_insert AFTER INSERT ON run_events
WHEN new.type IN ('message.user', 'message.assistant') AND coalesce(json_extract(new.payload, '$.content'), '') <> ''
BEGIN
    INSERT INTO run_search (content, run_id, seq) VALUES (json_extract(new.payload, '$.content'), new.run_id, new.seq);
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER run_search_insert;
DROP TABLE run_search;
