"""What the telemetry sampler costs a node: its own CPU time (all its threads, from the
samples' self_cpu_s) against wall time, after its first sample, and the one-off start.

    python tests/perf/telemetry_overhead.py                 # sample this machine for 60 s at 1 s
    python tests/perf/telemetry_overhead.py --seconds 30 --interval-s 0.1
    python tests/perf/telemetry_overhead.py --run RUN_DIR   # every host of every job of a run

Target: under 1% of one core per node (docs/concepts/telemetry.md).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.evidence import telemetry  # noqa: E402


def line(name: str, host: telemetry.Host) -> str:
    share = host.overhead
    span = host.samples[-1]["t"] - host.samples[0]["t"] if host.samples else 0.0
    return (
        f"{name:<28} {host.host:<10} {len(host.samples):>5} samples over {span:>6.1f} s: "
        f"{'-' if share is None else f'{100 * share:.3f}%'} of one core, start {host.startup_cpu_s or 0:.3f} s CPU"
    )


def here(seconds: float, interval_s: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / telemetry.DIR
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.telemetry", "sample", str(folder), f"--interval-s={interval_s}"], cwd=ROOT
        )
        time.sleep(seconds)
        proc.send_signal(signal.SIGUSR1)
        proc.wait(timeout=30)
        tele = telemetry.read(Path(tmp))
        assert tele is not None
        for host in tele.hosts.values():
            print(line(f"this machine, every {interval_s:g} s", host))


def run(path: Path) -> None:
    shares = []
    for job in sorted((path / "jobs").iterdir()):
        tele = telemetry.read(job)
        for host in tele.hosts.values() if tele else ():
            print(line(job.name, host))
            if host.overhead is not None:
                shares.append(host.overhead)
    if shares:
        print(f"worst {100 * max(shares):.3f}%, median {100 * sorted(shares)[len(shares) // 2]:.3f}% of one core")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--interval-s", type=float, default=telemetry.INTERVAL_S)
    p.add_argument("--run", type=Path, help="a run directory whose jobs' telemetry to summarise")
    args = p.parse_args()
    if args.run:
        run(args.run)
    else:
        here(args.seconds, args.interval_s)


if __name__ == "__main__":
    main()
