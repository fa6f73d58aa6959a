"""`bench collect` interrupted at many points of a large run: what remains each time.

    python tests/perf/collect_interrupt.py [N_JOBS] [POINTS]

Each round changes one result (a marker value in the first row and its samples), so the old
and the new collection differ, then starts `bench collect`, stops it after a delay spread over
its uninterrupted duration with SIGINT (Ctrl-C) or SIGKILL, and reads what is there:
summary.parquet, summary.csv and samples.parquet as a reader resolves them. Each must hold the
same marker, the old one or the new one, never a mix. The next `bench collect` must then leave
no temporary file or stale generation behind. tests/modules/harness/collect/test_gather.py runs a small
version of this; the figures in docs/reference/run-directory.md come from this script's output.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from fixtures import make_run  # noqa: E402

from harness.run.rundir import RunDir  # noqa: E402

COLLECT = [sys.executable, "-m", "harness.cli", "collect"]


def set_marker(run: RunDir, value: float) -> None:
    """The first result's first row: time and every sample `value`."""
    job = run.jobs()[0]
    path = run.path / job.result_path(job.runs[0])
    data = json.loads(path.read_text())
    row = data["rows"][0]
    row["time_us"] = value
    row["samples_us"] = [value] * len(row["samples_us"])
    path.write_text(json.dumps(data))


def markers(run: RunDir) -> tuple:
    """The marker as each of the three files a reader opens holds it (None: file absent)."""
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    files = run.summary_set()
    job = run.jobs()[0].name
    out = []
    for key in ("summary_parquet", "summary_csv"):
        if not files[key].exists():
            out.append(None)
            continue
        table = pq.read_table(files[key]) if key.endswith("parquet") else pacsv.read_csv(files[key])
        first = table.filter(pc.and_(pc.equal(table["job"], job), pc.equal(table["size_bytes"], 8)))
        out.append(first["time_us"][0].as_py())
    if files["samples_parquet"].exists():
        samples = pq.read_table(files["samples_parquet"])
        first = samples.filter(pc.and_(pc.equal(samples["job"], job), pc.equal(samples["size_bytes"], 8)))
        out.append(first["values"][0].as_py()[0])
    else:
        out.append(None)
    return tuple(out)


def leftovers(run: RunDir) -> list[str]:
    """Temporary files and generations no link names."""
    gens = run.generations
    keep = {"current", str(Path(gens / "current").resolve().name)} if (gens / "current").is_symlink() else set()
    stale = [f"{gens.name}/{p.name}" for p in gens.iterdir() if p.name not in keep] if gens.is_dir() else []
    return stale + [p.name for p in run.path.glob(".*.tmp")]


def collect_once(run: RunDir) -> float:
    start = time.perf_counter()
    subprocess.run([*COLLECT, str(run.path)], check=True, capture_output=True)
    return time.perf_counter() - start


def interrupt_points(root: Path, n_jobs: int, points: int) -> list[dict]:
    run = make_run(root, n_jobs)
    set_marker(run, 1.0)
    # the median of three uninterrupted collects: one alone can be off by half on a busy machine
    duration = statistics.median(collect_once(run) for _ in range(3))
    rows = []
    for i in range(points):
        old, new = float(i + 1), float(i + 2)
        assert markers(run) == (old, old, old), markers(run)
        set_marker(run, new)
        sig = signal.SIGINT if i % 2 else signal.SIGKILL
        # spread over the whole run and past it, denser towards its end, where the files are
        # written and committed; the last points fall after a collect of the usual length ends
        delay = 1.4 * duration * ((i + 0.5) / points) ** 0.5
        p = subprocess.Popen([*COLLECT, str(run.path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        p.send_signal(sig)
        _, err = p.communicate()
        seen = markers(run)
        kind = "old" if seen == (old, old, old) else "new" if seen == (new, new, new) else f"MIX {seen}"
        left = leftovers(run)
        subprocess.run([*COLLECT, str(run.path)], check=True, capture_output=True)  # the next command
        rows.append(
            {
                "delay_s": round(delay, 3),
                "signal": sig.name,
                "exit": p.returncode,
                "set": kind,
                "left_behind": left,
                "after_next_collect": leftovers(run),
                "stderr": err.strip()[-200:],
            }
        )
        if markers(run) != (new, new, new):
            raise AssertionError(f"the next collect did not give the new set: {markers(run)}")
        # the next round's old marker is this round's new one
    return rows


def main() -> None:
    import tempfile

    n_jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    points = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with tempfile.TemporaryDirectory() as tmp:
        rows = interrupt_points(Path(tmp) / "run", n_jobs, points)
    print(
        f"{n_jobs} results ({n_jobs * 25:,} summary rows), {points} interruptions; "
        f"old set {sum(r['set'] == 'old' for r in rows)}, new set {sum(r['set'] == 'new' for r in rows)}, "
        f"mixed {sum(r['set'].startswith('MIX') for r in rows)}; left behind after the next collect: "
        f"{sum(bool(r['after_next_collect']) for r in rows)}"
    )
    print(f"{'delay s':>8} {'signal':8} {'exit':>5} {'set':5} {'left behind':40} after next collect")
    for r in rows:
        print(
            f"{r['delay_s']:8.3f} {r['signal']:8} {r['exit']:5d} {r['set']:5} {', '.join(r['left_behind']) or '-':40} "
            f"{', '.join(r['after_next_collect']) or '-'}"
        )


if __name__ == "__main__":
    main()
