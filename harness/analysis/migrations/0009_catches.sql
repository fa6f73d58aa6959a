-- What each key could catch (docs/concepts/noise.md, "What a key can catch"): the smallest fall of
-- performance its verdict would have flagged, as a fraction (0.25: a quarter), NULL where it was
-- not judged; and the fall the gate required every unchanged key to catch (--must-catch). Rows
-- from before it hold NULL: gate.json did not say.
ALTER TABLE gate_bands ADD COLUMN catches {float};
ALTER TABLE gate_runs ADD COLUMN must_catch {float};
