-- What `bench predict` predicted from a run (docs/concepts/predict.md), stored by `history add`
-- with the run when its predict.json is there: each key at a node count the run may not have
-- measured, the figure, and the bounds of its 95% interval (NULL where it has none). Once a later
-- run of the cluster measures the key, what it measured and that run, by its fingerprint (a
-- copy of the history keeps it; ids are each history's own). Metrics: busbw_gbps of a
-- collective at one size (the size asked: a run measures it rounded down to whole elements a
-- rank, and is matched to it within 1%); step_time_ms and images_per_s_per_gpu
-- (tokens_per_s_per_gpu) of a training workload, whose size_bytes is 0. A run measures a
-- prediction only with the same workload parameters (params) and settings set (its hash,
-- settings); NULL where the predicting run's rows disagreed, and then none does.
CREATE TABLE predictions (
    run_id {int} NOT NULL REFERENCES runs (id),
    key TEXT NOT NULL,
    series TEXT NOT NULL,
    size_bytes {int} NOT NULL,
    nodes {int} NOT NULL,
    params TEXT,
    settings TEXT,
    metric TEXT NOT NULL,
    value {float} NOT NULL,
    low {float},
    high {float},
    measured {float},
    measured_by TEXT
);
CREATE INDEX predictions_by_run ON predictions (run_id);
CREATE INDEX predictions_by_nodes ON predictions (nodes, metric);
