-- The trace context of queued work: the W3C traceparent and tracestate of
-- the request that last queued a message on a run, so that the turn that
-- answers it, on whichever replica claims the run, links to that
-- request's trace. NULL when tracing was off.

-- +goose Up

ALTER TABLE runs
    ADD COLUMN queued_traceparent text CHECK (length(queued_traceparent) <= 128),
    ADD COLUMN queued_tracestate  text CHECK (length(queued_tracestate) <= 512);

-- +goose Down
ALTER TABLE runs
    DROP COLUMN queued_tracestate,
    DROP COLUMN queued_traceparent;
