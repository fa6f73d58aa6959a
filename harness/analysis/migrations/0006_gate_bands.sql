-- What the gate judged a run by (harness/analysis/gate.py): the baseline's method and K, the
-- threshold and provisional margin, the version of the gate's rules and the comparison's
-- method in words. Rows from before it hold NULL: gate.json did not say.
ALTER TABLE gate_runs ADD COLUMN method TEXT;
ALTER TABLE gate_runs ADD COLUMN k {int};
ALTER TABLE gate_runs ADD COLUMN threshold {float};
ALTER TABLE gate_runs ADD COLUMN margin {float};
ALTER TABLE gate_runs ADD COLUMN rules {int};
ALTER TABLE gate_runs ADD COLUMN comparison TEXT;
-- Each key's band as the gate drew it, in the metric's unit: the baseline's value, the band's
-- lower and upper limits (NULL where the key was judged within the run, provisionally), the
-- run's value, the verdict and the test.
CREATE TABLE gate_bands (
    run_id {int} NOT NULL REFERENCES runs (id),
    metric TEXT NOT NULL,
    key TEXT NOT NULL,
    baseline {float},
    low {float},
    high {float},
    value {float},
    verdict TEXT NOT NULL,
    test TEXT NOT NULL
);
CREATE INDEX gate_bands_by_run ON gate_bands (run_id);
