-- The stack each run ran on (harness/analysis/series.py): its fields as JSON and their digest.
-- A series is a cluster, a stack and a key: a baseline draws on the run's own series only.
-- Rows from before it hold NULL: their stack is read from their environment.
ALTER TABLE runs ADD COLUMN stack TEXT;
ALTER TABLE runs ADD COLUMN stack_fields TEXT;
CREATE INDEX runs_by_stack ON runs (cluster, stack, created);
