-- Message search: the words of users' and the assistant's messages,
-- indexed for full-text search (Store.SearchMessages). PostgreSQL indexes
-- the content of the events themselves; SQLite keeps an FTS5 table beside
-- them. The index is built in the migration's transaction, which holds
-- off appends to run_events while it is built (plan the upgrade of a
-- large log for it): CREATE INDEX CONCURRENTLY would wait for every older
-- transaction in the database, among them those of replicas waiting for
-- this migration, and so for ever.

-- +goose Up
CREATE INDEX run_events_search ON run_events
    USING gin (to_tsvector('simple', payload ->> 'content'))
    WHERE type IN ('message.user', 'message.assistant');

-- +goose Down
DROP INDEX run_events_search;
