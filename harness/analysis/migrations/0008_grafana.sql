-- only: postgresql
-- Read-only views in the form Grafana's PostgreSQL data source reads (docs/guides/fleet.md, "Grafana"):
-- a `time` column of a timestamp type, for time series and for annotations (`time`, `text`,
-- `tags` as a comma-separated string: Grafana's docs, "PostgreSQL annotations"). A run's time
-- is when it was planned (its plan's `created`, ISO 8601), else when it was added (UTC).
-- Statements here hold no question mark and no percent sign: they pass through the driver.
CREATE VIEW grafana_runs AS
SELECT r.id AS run_id,
       CASE WHEN r.created ~ '^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T'
            THEN CAST(r.created AS TIMESTAMPTZ) ELSE CAST(r.added || '+00' AS TIMESTAMPTZ) END AS time,
       r.cluster, coalesce(r.stack, '-') AS stack, r.label, r.keys, r.failed AS failed_rows,
       coalesce(g.verdict, 'not judged') AS gate, g.baseline, g.accepted, g.reason
FROM runs r LEFT JOIN gate_runs g ON g.run_id = r.id;

-- One row per key figure of each run (history plot's): busbw at the largest size, images/s per GPU.
CREATE VIEW grafana_series AS
SELECT t.time, t.cluster, t.stack, p.series AS key, p.metric, p.value, t.run_id, t.label
FROM grafana_runs t JOIN points p ON p.run_id = t.run_id;

-- Each judged key's band as the gate drew it, in the metric's unit, beside the run's value.
CREATE VIEW grafana_bands AS
SELECT t.time, t.cluster, t.stack, b.key, b.metric, b.baseline, b.low, b.high, b.value, b.verdict, b.test,
       t.run_id, t.label
FROM grafana_runs t JOIN gate_bands b ON b.run_id = t.run_id;

-- Each node check's per-node and per-link figures (a failed step's are left out).
CREATE VIEW grafana_node_series AS
SELECT CASE WHEN c.created ~ '^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T'
            THEN CAST(c.created AS TIMESTAMPTZ) ELSE CAST(c.added || '+00' AS TIMESTAMPTZ) END AS time,
       c.cluster, f.series AS key, f.metric, f.value, c.id AS check_id, c.label
FROM node_checks c JOIN node_figures f ON f.check_id = c.id
WHERE f.value IS NOT NULL;

-- Change points (of runs and of node checks) and failed nights, as annotations.
CREATE VIEW grafana_annotations AS
SELECT t.time, t.cluster, c.stack,
       'change point: ' || c.metric || ' ' || c.key || ': ' || CAST(c.before AS NUMERIC(20, 4)) || ' -> '
       || CAST(c.after AS NUMERIC(20, 4)) || ' from run ' || t.run_id AS text,
       'bench,change point' AS tags
FROM change_points c JOIN grafana_runs t ON t.run_id = c.run_id
UNION ALL
SELECT n.time, n.cluster, NULL,
       'change point: ' || c.metric || ' ' || c.key || ': ' || CAST(c.before AS NUMERIC(20, 4)) || ' -> '
       || CAST(c.after AS NUMERIC(20, 4)) || ' from node check ' || n.check_id,
       'bench,change point,node check'
FROM change_points c
JOIN (SELECT DISTINCT check_id, time, cluster FROM grafana_node_series) n ON n.check_id = c.check_id
UNION ALL
SELECT t.time, t.cluster, t.stack,
       'failed night: run ' || t.run_id || coalesce(' (' || t.label || ')', '') || ', gate ' || t.gate || ', '
       || t.failed_rows || ' failed rows',
       'bench,failed night'
FROM grafana_runs t WHERE t.gate = 'failed' OR t.failed_rows > 0;
