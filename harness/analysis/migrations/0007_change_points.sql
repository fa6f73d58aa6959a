-- The change points `bench history changes --store` found (harness/analysis/changes.py), per
-- series: the cluster, the stack's digest (NULL for node checks, which have none) and the key.
-- Each row names the first run (or node check) after the step, the medians either side, and
-- the parameters that found it. A search stores its findings in place of the cluster's earlier
-- ones of the same kind, in one transaction.
CREATE TABLE change_points (
    cluster TEXT NOT NULL,
    kind TEXT NOT NULL,
    stack TEXT,
    metric TEXT NOT NULL,
    key TEXT NOT NULL,
    run_id {int} REFERENCES runs (id),
    check_id {int} REFERENCES node_checks (id),
    before {float} NOT NULL,
    after {float} NOT NULL,
    change {float} NOT NULL,
    p_value {float} NOT NULL,
    method TEXT NOT NULL,
    permutations {int} NOT NULL,
    alpha {float} NOT NULL,
    min_segment {int} NOT NULL,
    threshold {float} NOT NULL,
    found TEXT NOT NULL
);
CREATE INDEX change_points_by_series ON change_points (cluster, kind, stack, metric, key);
