-- What each person's model requests used, by day (UTC), model and purpose
-- (a turn's step, a compaction's summary): the requests, and the input
-- and output tokens the model server counted. Each request adds to its
-- day's row; admins read the sums over a range of days.

-- +goose Up
CREATE TABLE model_usage (
    principal     text   NOT NULL,
    day           text   NOT NULL,
    model         text   NOT NULL,
    purpose       text   NOT NULL,
    requests      bigint NOT NULL,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    PRIMARY KEY (principal, day, model, purpose)
);

-- The days of a range, which the sums read.
CREATE INDEX model_usage_day_idx ON model_usage (day);

-- +goose Down
DROP TABLE model_usage;
