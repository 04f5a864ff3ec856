-- PostgreSQL's 00019 adds the check a process's second audit write in
-- flight makes under the audit lock. SQLite writes one transaction at a
-- time, and a process appends one write after another: there is nothing
-- to add here. The migration keeps the two engines' versions in step.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
