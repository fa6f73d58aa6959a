-- Node checks and their per-node and per-link figures (harness/analysis/nodehistory.py).
-- A history from before numbered migrations may hold these tables already.
CREATE TABLE IF NOT EXISTS node_checks (
    id {id},
    fingerprint TEXT NOT NULL UNIQUE,
    cluster TEXT NOT NULL,
    label TEXT,
    path TEXT NOT NULL,
    created TEXT NOT NULL,
    added TEXT NOT NULL,
    nodes {int} NOT NULL,
    named TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS node_checks_by_cluster ON node_checks (cluster, created);
CREATE TABLE IF NOT EXISTS node_figures (
    check_id {int} NOT NULL REFERENCES node_checks (id),
    series TEXT NOT NULL,
    metric TEXT NOT NULL,
    value {float}
);
CREATE INDEX IF NOT EXISTS node_figures_by_check ON node_figures (check_id);
