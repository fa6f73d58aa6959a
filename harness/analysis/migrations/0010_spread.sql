-- Each run's within-run spread (docs/concepts/noise.md, "A run noisier than its history"): the median over
-- its sampled rows of ln(p90 / p10) of their samples, worked out when the run is added, so that a
-- regress reads its history's spreads rather than decoding each run's samples. Runs added before
-- it hold NULL, and a regress works theirs out from their samples.
ALTER TABLE runs ADD COLUMN spread {float};
