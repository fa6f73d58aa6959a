-- What a run stored: a digest of its summary and samples as written to `data`, so that adding
-- the same run again is told apart from adding other figures under its identity (history.add).
-- Rows from before it hold NULL, which matches nothing: such a run is re-added only with --replace.
ALTER TABLE runs ADD COLUMN payload TEXT;
