-- Indexes of the reviewer's audit queries (AuditQuery): each equality
-- filter with seq after it, so that a page of a filtered query, in either
-- order, reads its records from one index in order; and the time, for
-- since and until. The server is the "server" member of the details: the
-- index is on that expression, which the queries write the same way.

-- +goose Up
CREATE INDEX audit_log_kind_idx ON audit_log (kind, seq);
CREATE INDEX audit_log_principal_idx ON audit_log (principal, seq);
CREATE INDEX audit_log_tool_idx ON audit_log (tool, seq);
CREATE INDEX audit_log_server_idx ON audit_log ((details ->> 'server'), seq);
CREATE INDEX audit_log_outcome_idx ON audit_log (outcome, seq);
CREATE INDEX audit_log_at_idx ON audit_log (at);

-- +goose Down
DROP INDEX audit_log_at_idx;
DROP INDEX audit_log_outcome_idx;
DROP INDEX audit_log_server_idx;
DROP INDEX audit_log_tool_idx;
DROP INDEX audit_log_principal_idx;
DROP INDEX audit_log_kind_idx;
