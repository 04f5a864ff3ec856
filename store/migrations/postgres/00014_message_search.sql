-- Message search: the words of users' and the assistant's messages,
-- indexed for full-text search (Store.SearchMessages). PostgreSQL indexes
-- the content of the events themselves; SQLite keeps an FTS5 table beside
-- them. The index is built concurrently, so that an upgrade of a large log
-- does not hold off writes while it is built.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_events_search ON run_events
    USING gin (to_tsvector('simple', payload ->> 'content'))
    WHERE type IN ('message.user', 'message.assistant');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS run_events_search;
