"""How long `bench transport` takes to read hostile NCCL logs: it must be linear in the log's size.
Not part of the test suite; run

    python tests/perf/nccl_parse.py [SIZES_MB...]

It writes, for each size, three logs into a temporary directory and times `transport.read_log`
on each (the best of three runs):
- "real": the lines of tests/fixtures/nccl/ib-gdrdma-2.28.9.log, repeated by 64 ranks on 8 hosts;
- "one line": a single line of that many bytes of host-name characters, which a search for the
  "host:pid:tid [dev] NCCL" prefix once tried from each of its characters (quadratic);
- "spaces": NCCL INFO lines whose message is "Using network X", many spaces, then "Y", which the
  lazy `(.+?)\\s*$` pattern once scanned from each of its characters.
The figures are seconds and MB/s; a linear parser keeps MB/s flat as the size grows.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.evidence import transport

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "ib-gdrdma-2.28.9.log"


def real(size: int) -> bytes:
    lines = [line for line in FIXTURE.read_text().splitlines() if " NCCL " in line]
    out, n = [], 0
    while n < size:
        for rank in range(64):
            for line in lines:
                text = line.replace(line.split(":", 1)[0], f"node{rank // 8:03d}", 1) + "\n"
                out.append(text)
                n += len(text)
    return "".join(out).encode()[:size]


def one_line(size: int) -> bytes:
    return b"a" * size


def spaces(size: int) -> bytes:
    line = "node001:1234:1234 [0] NCCL INFO Using network X" + " " * 60_000 + "Y\n"
    return (line * (size // len(line) + 1)).encode()[:size]


def best_of_three(path: Path) -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        transport.read_log(path)
        times.append(time.perf_counter() - start)
    return min(times)


def main(sizes_mb: list[float]) -> None:
    print(f"{'log':<10} {'MB':>8} {'seconds':>9} {'MB/s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind, make in (("real", real), ("one line", one_line), ("spaces", spaces)):
            for mb in sizes_mb:
                path = Path(tmp) / "nccl.log"
                path.write_bytes(make(int(mb * 2**20)))
                s = best_of_three(path)
                print(f"{kind:<10} {mb:>8g} {s:>9.3f} {mb / s:>8.1f}", flush=True)


if __name__ == "__main__":
    main([float(a) for a in sys.argv[1:]] or [1, 10, 100])
