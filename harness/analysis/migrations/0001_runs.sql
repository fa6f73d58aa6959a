-- The runs of each cluster, their summaries and samples (Parquet), and the key figures that
-- `history plot` draws (harness/analysis/history.py). Version 2 in meta is what benches
-- before numbered migrations read.
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id {id},
    fingerprint TEXT NOT NULL UNIQUE,
    cluster TEXT NOT NULL,
    label TEXT,
    path TEXT NOT NULL,
    sweep TEXT,
    created TEXT NOT NULL,
    added TEXT NOT NULL,
    rows {int} NOT NULL,
    keys {int} NOT NULL,
    failed {int} NOT NULL,
    environment TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_cluster ON runs (cluster, created);
CREATE TABLE IF NOT EXISTS data (run_id {int} PRIMARY KEY REFERENCES runs (id), summary {bytes} NOT NULL, samples {bytes});
CREATE TABLE IF NOT EXISTS points (
    run_id {int} NOT NULL REFERENCES runs (id),
    series TEXT NOT NULL,
    metric TEXT NOT NULL,
    value {float} NOT NULL
);
CREATE INDEX IF NOT EXISTS points_by_run ON points (run_id);
INSERT INTO meta (key, value) SELECT 'version', '2' WHERE NOT EXISTS (SELECT 1 FROM meta WHERE key = 'version');
