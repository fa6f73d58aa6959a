-- The gate's verdict on each run it judged, and the keys it failed (harness/analysis/gate.py).
-- A history from before numbered migrations may hold these tables already.
CREATE TABLE IF NOT EXISTS gate_runs (
    run_id {int} PRIMARY KEY REFERENCES runs (id),
    verdict TEXT NOT NULL,
    status {int} NOT NULL,
    baseline TEXT NOT NULL,
    accepted TEXT,
    reason TEXT
);
CREATE TABLE IF NOT EXISTS gate_keys (run_id {int} NOT NULL REFERENCES runs (id), key TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS gate_keys_by_run ON gate_keys (run_id);
