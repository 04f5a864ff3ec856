-- What each person's model requests used, by day (UTC), model and purpose
-- (a turn's step, a compaction's summary): the requests, and the input
-- and output tokens the model server counted. Each request adds to its
-- day's row; admins read the sums over a range of days.

-- +goose Up
CREATE TABLE model_usage (
    principal     TEXT    NOT NULL,
    day           TEXT    NOT NULL,
    model         TEXT    NOT NULL,
    purpose       TEXT    NOT NULL,
    requests      INTEGER NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    PRIMARY KEY (principal, day, model, purpose)
) STRICT;

-- The days of a range, which the sums read.
CREATE INDEX model_usage_day_idx ON model_usage (day);

-- +goose Down
DROP TABLE model_usage;
