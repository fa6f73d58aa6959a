"""What a job's own files say, read after it or beside it: the per-node samples and the
workloads' marks (`telemetry`), NCCL's and gloo's transport facts (`transport`), the rank that
held the others in a stall (`hangs`), the slow rank or node (`stragglers`) and the lines of a
job's log that say why it failed (`logs`). `telemetry` and `hangs` also run inside a job, on
nodes that may have only bench's code: they import the standard library and benchmarks/ alone."""
