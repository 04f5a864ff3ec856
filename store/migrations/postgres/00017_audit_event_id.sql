-- The identity of an audit event, shared by every attempt to record it
-- (AuditRecord.EventID): a caller that retries an append after an error
-- that may have committed gets the record already written instead of a
-- second one. Records written before it have none (''), and are not
-- indexed.

-- +goose Up

ALTER TABLE audit_log ADD COLUMN event_id text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX audit_log_event_id_key ON audit_log (event_id) WHERE event_id <> '';

-- +goose Down
DROP INDEX audit_log_event_id_key;
ALTER TABLE audit_log DROP COLUMN event_id;
