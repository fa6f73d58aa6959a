"""What this machine needs for two fleet-scale targets before bench does any work of its own:

    python tests/perf/floors.py [--rounds N]

- the disk's part of `bench sweep --executor slurm --dry-run` of 10,000 jobs: a directory and a
  job.sbatch of its size for each, then one syncfs(2), as RunDir.write_job_files does, in one
  process (bench gives half of a large sweep's to a worker: docs/reference/run-directory.md);
- the least `bench collect` of 100,000 rows could be: the 4,000 result files of
  tests/perf/fixtures.py read and parsed (orjson), their collective rows turned into columns,
  an Arrow table of them, and summary.parquet, summary.csv and samples.parquet encoded in memory,
  with the cycle collector off as collect has it: no checks, no job table, no transport or
  telemetry, 9 columns of the summary's 60, nothing written.

Each is timed in this process (the interpreter's start, about 0.2 s with bench's imports, is
not in it); the figures are the best of --rounds. CONTRIBUTING.md ("Speed") quotes them beside
bench's own.
"""

from __future__ import annotations

import argparse
import gc
import io
import itertools
import os
import tempfile
import time
from operator import itemgetter
from pathlib import Path

from fixtures import make_run

from harness.run.rundir import sync_filesystem

SCRIPT_BYTES = 6_325  # the mean job.sbatch of bench_speed.py's 10,000-job sweep
FIGURES = ("size_bytes", "time_us", "algbw_gbps", "busbw_gbps", "time_us_p10", "time_us_median", "time_us_p90")


def disk(root: Path, jobs: int = 10_000) -> float:
    text = b"#" * SCRIPT_BYTES
    (root / "jobs").mkdir()
    start = time.perf_counter()
    top = os.open(root / "jobs", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(jobs):
            os.mkdir(f"job{i}", dir_fd=top)
            fd = os.open(f"job{i}/job.sbatch", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=top)
            os.write(fd, text)
            os.close(fd)
    finally:
        os.close(top)
    sync_filesystem(root)
    return time.perf_counter() - start


def bare_collect(run: Path) -> float:
    import numpy as np
    import orjson
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    gc.disable()  # as collect does: nothing made here is in a cycle
    start = time.perf_counter()
    files = sorted(run.glob("jobs/*/allreduce.json"))
    docs = []
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            docs.append(orjson.loads(os.read(fd, os.fstat(fd).st_size)))
        finally:
            os.close(fd)
    rows = [r for d in docs for r in d["rows"]]
    columns = dict(zip(FIGURES, map(np.array, zip(*map(itemgetter(*FIGURES), rows)))))
    per_file = np.fromiter(map(len, (d["rows"] for d in docs)), dtype=np.int64, count=len(docs))
    jobs = pa.array([f.parent.name for f in files]).take(pa.array(np.repeat(np.arange(len(docs)), per_file)))
    summary = pa.table({"job": jobs, "collective": [r["collective"] for r in rows], **columns})
    lengths = np.fromiter(map(len, (r["samples_us"] for r in rows)), dtype=np.int64, count=len(rows))
    flat = np.fromiter(itertools.chain.from_iterable(r["samples_us"] for r in rows), dtype=float, count=lengths.sum())
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]), type=pa.int32())
    samples = pa.table({"values": pa.ListArray.from_arrays(offsets, pa.array(flat))})
    for table, write in ((summary, pq.write_table), (summary, pacsv.write_csv), (samples, pq.write_table)):
        write(table, io.BytesIO())
    took = time.perf_counter() - start
    gc.enable()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = make_run(root / "run", 4000).path
        writes = []
        for i in range(args.rounds):
            (root / f"d{i}").mkdir()
            writes.append(disk(root / f"d{i}"))
        reads = [bare_collect(run) for _ in range(args.rounds)]
    print(f"10,000 job directories and job.sbatch files, then syncfs: {min(writes):.3f} s (best of {args.rounds})")
    print(f"100,000 rows read, parsed and encoded with no checks: {min(reads):.3f} s (best of {args.rounds})")


if __name__ == "__main__":
    main()
