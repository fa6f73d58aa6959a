"""How each command grows with nodes and ranks, at the shapes our users run: 8, 64, 512 and 1,024
nodes of 8 GPUs (64 to 8,192 ranks), and the node check to 2,048 nodes. Not part of either test
tier; run by hand, on a quiet machine:

    python tests/perf/scale.py [--nodes 8,64,512,1024] [--only sweep,collect,...] [--keep DIR]

(GNU time, /usr/bin/time from Debian's `time`, measures each command's memory.)

Each case's inputs are made first, in the formats bench's jobs write (results and per-rank files
as benchmarks/runtime.py lays them out, NCCL 2.28.9 debug lines from tests/fixtures/nccl, this
machine's own telemetry sampler, progress records as benchmarks/runtime.py writes them), and are
not timed. A command runs as a user runs it, a process of its own with the interpreter's start
(`command`); a part of one runs in a forked process (`call`). For each it prints the seconds and
the peak memory at each size (a command's whole process; a call's growth over what it started
with), then the slope of log seconds against log nodes, over every size and over the last two.
A slope of 1 is linear, and each is held at or below 1.15: docs/concepts/scale.md says what each
command's work grows with, and CONTRIBUTING.md ("Speed") quotes a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from fixtures import FIRST_NIGHT, FIXTURES, SWEEPS, collective_row, dated

from benchmarks.catalog import COLLECTIVES
from benchmarks.common import MEASUREMENT_RULES, json_safe, links_path, ranks_path
from benchmarks.linkprobe import pair_partner, probe_rounds
from benchmarks.results import SCHEMA_VERSION
from harness.run.plan import Job
from harness.run.rundir import COMPLETED, JobRecord, RunDir

GPUS = 8
NODES = (8, 64, 512, 1024)
NODE_CHECK = (8, 64, 512, 1024, 2048)
SIZES = [8 * 4**i for i in range(14)]  # 8 B .. 512 MiB, every other size of nccl-tests' -f 2
ITERS = 20
LINK_ITERS = 5
NCCL_LOG = FIXTURES / "nccl" / "ib-gdrdma-2.28.9.log"  # one rank's lines: cn76, pid 155


def host(i: int) -> str:
    return f"gpu{i:04d}"


# --------------------------------------------------------------------------- inputs


def profile(root: Path) -> Path:
    """The example profile, its python this interpreter, so that a dry run checks it by starting
    it (a profile whose python is a name after setup lines is not checked: nothing to time)."""
    data = yaml.safe_load((SWEEPS / "clusters" / "example.yaml").read_text())
    data.update(python=sys.executable, setup=[], modules=[])
    path = root / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def user_sweep(root: Path, nodes: int) -> Path:
    """The default sweep to `nodes` nodes of 8 GPUs, every collective, ResNet-50 weak scaling only
    (its global batch of 256 divides no world past 32 nodes of 8)."""
    data = yaml.safe_load((SWEEPS / "default.yaml").read_text())
    data.update(max_nodes=nodes, gpus_per_node=[GPUS])
    data["workloads"]["synthetic"].update(scaling=["weak"], global_batch=None)
    data["workloads"]["allreduce"]["collectives"] = list(COLLECTIVES)
    path = root / f"sweep-{nodes}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def collectives_sweep(root: Path, nodes: list[int]) -> Path:
    """The collectives alone, every one, on `nodes` nodes of 8 GPUs, one NCCL set and launcher."""
    data = yaml.safe_load((SWEEPS / "default.yaml").read_text())
    data.update(nodes=nodes, max_nodes=max(nodes), gpus_per_node=[GPUS], launchers=["srun"], exclude=[])
    data["nccl"] = {"default": {}}
    data["workloads"] = {
        "allreduce": {**data["workloads"]["allreduce"], "collectives": list(COLLECTIVES), "max_bytes": SIZES[-1]},
        **dict.fromkeys(("synthetic", "real", "transformer"), False),
    }
    path = root / f"collectives-{'-'.join(map(str, nodes))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def dry_run(root: Path, sweep: Path, prof: Path, name: str) -> RunDir:
    subprocess.run(
        [sys.executable, "-m", "harness.cli", "sweep", str(sweep), "--executor", "slurm", "--cluster", str(prof)]
        + ["--dry-run", "--out", str(root / name)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return RunDir(root / name)


def telemetry_template(root: Path) -> list[str]:
    """A few seconds of this machine's own sampler, in its own format."""
    folder = root / "sampled"
    sampler = subprocess.Popen(
        [sys.executable, "-m", "harness.telemetry", "sample", str(folder), "--interval-s", "0.2"],
        stdin=subprocess.DEVNULL,
    )
    time.sleep(2)
    sampler.send_signal(signal.SIGTERM)
    sampler.wait(timeout=30)
    (path,) = folder.glob("*.samples.jsonl")
    return path.read_text().splitlines()


def fill_job(run: RunDir, job: Job, lines: list[str], rng: random.Random, slow_host: str | None = None) -> None:
    """The files of one completed collectives job of job.nodes x 8 ranks, as a job on NCCL
    leaves them: result, per-rank file, one NCCL debug file and progress record a rank, one
    telemetry file a node."""
    (wr,) = job.runs
    world, ranks = job.world_size, range(job.world_size)
    hosts = [host(r // GPUS) for r in ranks]
    jdir = run.path / "jobs" / job.name
    result_path = run.path / job.result_path(wr)
    groups = ["world", "intra", "inter"]
    rows = [collective_row(rng, s, ITERS, c, group=g) for c in COLLECTIVES for g in groups for s in SIZES]
    pattern = job.debug_env(wr, ())["NCCL_DEBUG_FILE"]
    argv = job.run_args(wr, 600.0)
    rounds = probe_rounds(world)
    partners = [[pair_partner(r, k, world) for k in rounds] for r in ranks]
    # a pass's pair times, the slow host's pairs half as slow again; the even worlds here leave
    # no rank idle in a round
    link_us = [
        [[rng.uniform(900, 1000) * (1.5 if slow_host in (hosts[r], hosts[p]) else 1)] * LINK_ITERS for p in ps]
        for r, ps in zip(ranks, partners)
    ]
    links = {"size_bytes": 4 * 2**20, "iters": LINK_ITERS, "partners": partners, "time_us": link_us}
    result = {
        "schema_version": SCHEMA_VERSION,
        "workload": wr.workload,
        "created": "2026-12-02T02:00:00+00:00",
        "world_size": world,
        "nodes": job.nodes,
        "gpus_per_node": GPUS,
        "device": "cuda",
        "backend": "nccl",
        "launcher": "slurm-srun",
        "argv": argv,
        "params": {
            "min_bytes": SIZES[0],
            "max_bytes": SIZES[-1],
            "step_factor": 4,
            "iters": ITERS,
            "warmup_iters": 5,
            "check_iters": 1,
            "dtype": "float32",
            "op": "sum",
            "collectives": list(COLLECTIVES),
            "groups": {
                "world": [list(ranks)],
                "intra": [list(range(n * GPUS, (n + 1) * GPUS)) for n in range(job.nodes)],
                "inter": [list(range(g, world, GPUS)) for g in range(GPUS)],
            },
            "out_of_place": True,
            "link_bytes": 4 * 2**20,
            "link_iters": LINK_ITERS,
            "timing": "worst rank; per-call samples from the host clock",
        },
        "rows": rows,
        "environment": {
            "launcher": "slurm-srun",
            "world_size": world,
            "backend": "nccl",
            "device_type": "cuda",
            "measurement_rules": MEASUREMENT_RULES,
            "hosts": sorted(set(hosts)),
            "ranks": [
                {"rank": r, "local_rank": r % GPUS, "node_rank": r // GPUS, "hostname": hosts[r], "pid": 1000 + r}
                for r in ranks
            ],
        },
        "transport": {"source": "nccl_log", "debug": "INFO", "debug_file": pattern},
        "per_rank_file": os.path.basename(ranks_path(result_path)),
        "links_file": os.path.basename(links_path(result_path)),
    }
    result_path.parent.mkdir(parents=True, exist_ok=True)
    # each rank's own time of each row, as rank 0 gathers them (the row's time for every rank)
    head = {"schema_version": SCHEMA_VERSION, "workload": wr.workload, "hosts": hosts}
    per_rank = [
        {**{k: row[k] for k in ("collective", "group", "size_bytes")}, "time_us": [row["time_us"]] * world}
        for row in rows
    ]
    Path(ranks_path(result_path)).write_text(json.dumps(json_safe({**head, "rows": per_rank})))
    Path(links_path(result_path)).write_text(json.dumps(json_safe({**head, "links": links})))
    result_path.write_text(json.dumps(json_safe(result)))
    rank_lines = [line for line in NCCL_LOG.read_text().splitlines() if line.startswith("cn76:")]
    log_text = "\n".join(rank_lines) + "\n"
    (run.path / job.nccl_log_dir).mkdir(parents=True, exist_ok=True)
    progress = jdir / "progress"
    progress.mkdir(exist_ok=True)
    for r in ranks:
        name = pattern.replace("%h", hosts[r]).replace("%p", str(1000 + r))
        (run.path / name).write_text(log_text.replace("cn76:155:", f"{hosts[r]}:{1000 + r}:"))
        record = {"rank": r, "host": hosts[r], "pid": 1000 + r, "phase": "done", "n": 40, "t": 1796240216.0}
        (progress / f"{wr.key}.rank{r}.json").write_text(json.dumps(record))
    tele = jdir / "telemetry"
    tele.mkdir(exist_ok=True)
    first = json.loads(lines[0])["host"]
    for i in range(job.nodes):
        (tele / f"{host(i)}.samples.jsonl").write_text("\n".join(lines).replace(f'"{first}"', f'"{host(i)}"') + "\n")
    start = json.loads(lines[1])["t"]
    (tele / "phases.jsonl").write_text(
        json.dumps({"key": wr.key, "event": "start", "t": start})
        + "\n"
        + json.dumps({"key": wr.key, "event": "end", "t": start + 1})
        + "\n"
    )


def slow(nodes: int) -> str:
    """The node a job's link probe finds slow."""
    return host(nodes * 5 // 8)


def completed_run(root: Path, name: str, nodes: list[int], prof: Path, lines: list[str], seed: int = 0) -> RunDir:
    """A Slurm run of the collectives on `nodes`, every job completed with its files."""
    run = dry_run(root, collectives_sweep(root, nodes), prof, name)
    jobs = run.jobs()
    rng = random.Random(seed)
    for job in jobs:
        fill_job(run, job, lines, rng, slow(job.nodes))
    records = {
        j.name: JobRecord(name=j.name, nodes=j.nodes, state=COMPLETED, runs={r.key: COMPLETED for r in j.runs})
        for j in jobs
    }
    run.write_table(records, "slurm")
    return run


# --------------------------------------------------------------------------- cases


Work = list[str] | Callable[[], object]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    what: str
    make: Callable[[Path, int, dict], Work]  # (a folder of its own, nodes, shared inputs) -> work
    sizes: tuple[int, ...] = NODES


def bench(*args: object) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *map(str, args)]


def _sweep(root: Path, n: int, shared: dict) -> Work:
    return bench("sweep", user_sweep(root, n), "--executor", "slurm", "--cluster", shared["profile"]) + [
        "--dry-run",
        "--out",
        str(root / "run"),
    ]


def _cost(root: Path, n: int, shared: dict) -> Work:
    from harness.config.cluster_profile import load_profile
    from harness.config.sweepfile import load_sweep
    from harness.run.cost import estimate
    from harness.run.plan import expand

    jobs, prof = expand(load_sweep(user_sweep(root, n))), load_profile(shared["profile"])
    return lambda: estimate(jobs, prof)


def _one_job(root: Path, n: int, shared: dict) -> RunDir:
    return completed_run(root, "run", [n], shared["profile"], shared["telemetry"])


def _collect(root: Path, n: int, shared: dict) -> Work:
    return bench("collect", _one_job(root, n, shared).path)


def _stragglers(root: Path, n: int, shared: dict) -> Work:
    from harness.evidence.stragglers import judge_file

    run = _one_job(root, n, shared)
    (job,) = run.jobs()
    path = Path(links_path(run.path / job.result_path(job.runs[0])))

    def verdict() -> list:
        named = judge_file(job.name, path)
        assert [s.host for s in named] == [slow(n)], named
        return named

    return verdict


def _transport(root: Path, n: int, shared: dict) -> Work:
    from harness.evidence import transport

    run = _one_job(root, n, shared)
    (job,) = run.jobs()
    result = json.loads((run.path / job.result_path(job.runs[0])).read_text())
    return lambda: transport.columns(transport.rank_facts(result, run.path))


def _per_rank(root: Path, n: int, shared: dict) -> Work:
    """What rank 0 does with the per-rank times it gathered: the per-rank file's rows, written as
    benchmarks/runtime.py writes the files beside a result."""
    from benchmarks.collectives import per_rank_rows
    from benchmarks.results import atomic_write_json

    world, rng = n * GPUS, random.Random(n)
    rows = [{"collective": c, "group": g, "size_bytes": s} for c in COLLECTIVES for g in ("world", "intra", "inter")
            for s in SIZES]  # fmt: skip
    ranks_us = [[rng.uniform(1.0, 1e4) for _ in rows] for _ in range(world)]
    head = {"schema_version": SCHEMA_VERSION, "workload": "allreduce", "hosts": [host(r // GPUS) for r in range(world)]}

    def write() -> None:
        atomic_write_json(root / "allreduce.ranks.json", json_safe({**head, "rows": per_rank_rows(rows, ranks_us)}))

    return write


def _hangs(root: Path, n: int, shared: dict) -> Work:
    """Every rank in the all-reduce of 512 MiB but one, stopped in the one before."""
    from harness.evidence import hangs

    world, stopped = n * GPUS, n * GPUS // 2 + 3
    folder = root / "progress"
    folder.mkdir()
    for r in range(world):
        phase = "all_reduce 256M" if r == stopped else "all_reduce 512M"
        record = {"rank": r, "host": host(r // GPUS), "pid": 1000 + r, "phase": phase, "n": 30, "t": 1796240216.0}
        (folder / f"allreduce.rank{r}.json").write_text(json.dumps(record))

    def probe(ranks: list[hangs.Rank]) -> None:
        for r in ranks:
            r.state = "T" if r.rank == stopped else "S"

    def attribute() -> str:
        why, _, _ = hangs.diagnose(folder, "allreduce", world, probe=probe, wait_s=0, flight_s=0)
        assert f"rank {stopped} on" in why, why
        return why

    return attribute


def _sweep_run(root: Path, n: int, shared: dict, name: str = "run", seed: int = 0) -> RunDir:
    """A collected sweep of the collectives on 1, 2, 4 ... n nodes."""
    nodes = [2**i for i in range(int(math.log2(n)) + 1)]
    run = completed_run(root, name, nodes, shared["profile"], shared["telemetry"], seed)
    subprocess.run(bench("collect", run.path), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return run


def _report(root: Path, n: int, shared: dict) -> Work:
    return bench("report", _sweep_run(root, n, shared).path, "--out", root / "report.html")


def _predict(root: Path, n: int, shared: dict) -> Work:
    return bench("predict", _sweep_run(root, n, shared).path, "--nodes", f"{2 * n},{4 * n}")


def _plots(root: Path, n: int, shared: dict) -> Work:
    return bench("plot", _sweep_run(root, n, shared).path)


def _compare(root: Path, n: int, shared: dict) -> Work:
    a, b = (_sweep_run(root, n, shared, name, seed) for name, seed in (("a", 0), ("b", 1)))
    return bench("compare", a.path, b.path, "--csv", root / "compare.csv")


def _regress(root: Path, n: int, shared: dict) -> Work:
    """Against the band of three nights (the least a band takes)."""
    a, b = (_sweep_run(root, n, shared, name, seed) for name, seed in (("a", 0), ("b", 1)))
    db = root / "history.sqlite"
    for night in range(3):
        dated(a.path, FIRST_NIGHT + dt.timedelta(days=night))  # a plan the history has not seen
        add = bench("history", "add", a.path, "--cluster", "scale", "--db", db, "--create")
        subprocess.run(add, check=True, stdout=subprocess.DEVNULL)
    dated(b.path, FIRST_NIGHT + dt.timedelta(days=3))
    return bench("regress", b.path, "--cluster", "scale", "--db", db, "--baseline", "median:3", "--out", root / "r")


def _node_plan(root: Path, n: int, shared: dict) -> Work:
    from harness.nodes import rounds

    names, o = [host(i) for i in range(n)], rounds.Options(gemm=True, partners=3)
    return lambda: sum(len(rounds.steps(r, o, "jobs/nodes")) for r in rounds.schedule(names, o))


def _node_figures(names: list[str], rng: random.Random, bad: int) -> dict[str, dict]:
    """A check's pair figures at --partners 3, every pair with the node `bad` at half speed, and
    the pair of nodes 1 and 2."""
    from harness.nodes import rounds

    figures: dict[str, dict] = {"busbw_gbps": {}, "p2p_gbps": {}}
    for kind, members in rounds.schedule(names, rounds.Options(partners=3)):
        for a, b in members if kind == "pair" else ():
            slow = 0.5 if bad in (a, b) or (a, b) == (1, 2) else 1.0
            figures["busbw_gbps"][(names[a], names[b])] = 45 * slow * rng.uniform(0.97, 1.03)
            figures["p2p_gbps"][(names[a], names[b])] = 22 * slow * rng.uniform(0.97, 1.03)
    return figures


def _node_verdict(root: Path, n: int, shared: dict) -> Work:
    """Every pair of a check of 3 partners a node (every pair grows as the nodes squared:
    tests/perf/bench_speed.py times 2,048 nodes' 2 million pairs), one node and one link slow."""
    from harness.nodes.verdict import judge

    names, bad = [host(i) for i in range(n)], n * 5 // 8
    figures = _node_figures(names, random.Random(0), bad)

    def verdict() -> str | None:
        v = judge(names, {}, figures, 0.1, {})
        assert v.drain == host(bad), v.drain
        return v.drain

    return verdict


CHECKS = 8  # node checks in the dashboard's history


def _node_history(root: Path, n: int) -> Path:
    """A history of CHECKS node checks of N nodes at --partners 3, one night apart, each with its
    check.json and record (as harness/nodes/driver.py writes them) and its verdict's figures; a
    node slow from the fifth check on."""
    from harness.analysis import nodehistory
    from harness.analysis.store import Location
    from harness.nodes.driver import FOLDER, PLAN, RECORD, RECORD_VERSION
    from harness.nodes.verdict import judge

    names, db = [host(i) for i in range(n)], root / "history.sqlite"
    for k in range(CHECKS):
        check = root / f"check{k}"
        (check / FOLDER).mkdir(parents=True)
        (check / PLAN).write_text(json.dumps({"format_version": 1, "nodes": names, "check": k}))
        record = check / FOLDER / RECORD
        record.write_text(json.dumps({"format_version": RECORD_VERSION, "hosts": names, "rounds": 6, "ran": 6,
                                      "round_s": [40.0] * 6}))  # fmt: skip
        night = (FIRST_NIGHT + dt.timedelta(days=k)).timestamp()
        os.utime(record, (night, night))
        v = judge(names, {}, _node_figures(names, random.Random(k), n * 5 // 8 if k >= CHECKS // 2 else n), 0.1, {})
        nodehistory.add(Location(str(db)), check, "scale", None, v, create=True, new_cluster=k == 0)
    return db


def _node_changes(root: Path, n: int, shared: dict) -> Work:
    return bench("history", "changes", "--cluster", "scale", "--nodes", "--db", _node_history(root, n))


def _dashboard(root: Path, n: int, shared: dict) -> Work:
    """The site of that history, its change points stored: the node page is what grows."""
    db = _node_history(root, n)
    subprocess.run(bench("history", "changes", "--cluster", "scale", "--nodes", "--store", "--db", db), check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return bench("dashboard", "--db", db, "--out", root / "site")


CASES = (
    Case("sweep", "bench sweep --dry-run, Slurm, profile, every collective, 1..N nodes of 8", _sweep),
    Case("cost", "the cost estimate of that sweep", _cost),
    Case("collect", "bench collect of one job of N x 8 ranks", _collect),
    Case("stragglers", "the straggler verdict on that job's link probe", _stragglers),
    Case("transport", "that job's N x 8 NCCL logs read and combined", _transport),
    Case("per-rank", "rank 0's per-rank file of one job of N x 8 ranks, from what it gathered", _per_rank),
    Case("hangs", "hang attribution over N x 8 ranks' progress records, one stopped", _hangs),
    Case("report", "bench report of a collected sweep on 1..N nodes", _report),
    Case("plots", "bench plot of that sweep", _plots),
    Case("predict", "bench predict of that sweep at 2N and 4N nodes", _predict),
    Case("compare", "bench compare of two such sweeps", _compare),
    Case("regress", "bench regress of one against a history of the other", _regress),
    Case("node-plan", "the node check's plan, --partners 3: every round's steps, N nodes", _node_plan, NODE_CHECK),
    Case("node-verdict", "the node check's verdict, --partners 3, N nodes", _node_verdict, NODE_CHECK),
    Case(
        "node-changes", f"bench history changes --nodes over {CHECKS} node checks of N nodes", _node_changes, NODE_CHECK
    ),
    Case("dashboard", "bench dashboard of those checks, their change points stored", _dashboard, NODE_CHECK),
)


# --------------------------------------------------------------------------- measuring


def _as_installed() -> dict[str, str]:
    """A command's environment: bytecode compiled once, as an installed bench has it."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "bench-scale-bytecode")
    return env


def run_command(argv: list[str]) -> tuple[float, float]:
    """Seconds and peak resident MiB of one command, a process of its own. The peak is GNU
    time's (%M): a child forked from this process would count this one's memory in its own."""
    with tempfile.NamedTemporaryFile("r") as peak:
        start = time.perf_counter()
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", peak.name, *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=_as_installed(),
        )
        seconds = time.perf_counter() - start
        kib = int(peak.read().split()[-1])
    if proc.returncode not in (0, 1) or b"warning" in proc.stderr:  # regress's 1 is a verdict
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return seconds, kib / 1024


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def run_call(fn: Callable[[], object]) -> tuple[float, float]:
    """Seconds and the growth of resident MiB of one call, in a forked process: its peak is
    reset first (/proc/self/clear_refs, 5: proc(5))."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            Path("/proc/self/clear_refs").write_text("5")
            before = _status_kib("VmRSS")
            start = time.perf_counter()
            fn()
            seconds = time.perf_counter() - start
            os.write(write, json.dumps([seconds, (_status_kib("VmHWM") - before) / 1024]).encode())
            os._exit(0)
        except BaseException as exc:  # the parent says it
            os.write(write, json.dumps({"error": repr(exc)}).encode())
            os._exit(1)
    os.close(write)
    with os.fdopen(read) as f:
        said = json.loads(f.read() or "{}")
    os.waitpid(pid, 0)
    if not isinstance(said, list):
        raise RuntimeError(said.get("error", "the forked call said nothing"))
    return said[0], said[1]


def slope(points: list[tuple[int, float]]) -> float:
    """Least squares slope of log seconds on log nodes."""
    xs, ys = [math.log(n) for n, _ in points], [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default=",".join(map(str, NODES)), help="node counts (default %(default)s)")
    parser.add_argument("--only", default="", help="cases by name, comma-separated (default: every one)")
    parser.add_argument("--rounds", type=int, default=3, help="the best of this many (default %(default)s)")
    parser.add_argument("--keep", type=Path, help="make the inputs here and keep them")
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    only = {c for c in args.only.split(",") if c}
    unknown = only - {c.name for c in CASES}
    if unknown:
        parser.error(f"--only: no case {', '.join(sorted(unknown))}; cases: {', '.join(c.name for c in CASES)}")
    top = args.keep or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    top.mkdir(parents=True, exist_ok=True)
    shared = {"profile": profile(top), "telemetry": telemetry_template(top)}
    print(f"{'case':<13} {'kind':<7} {'nodes':>6} {'ranks':>6} {'seconds':>8} {'MiB':>7}")
    try:
        for case in CASES:
            if only and case.name not in only:
                continue
            points = []
            wider = [s for s in case.sizes if s > max(sizes)] if max(sizes) >= max(NODES) else []
            for n in sizes + wider:
                folder = top / case.name / str(n)
                folder.mkdir(parents=True, exist_ok=True)
                work = case.make(folder, n, shared)
                kind = "command" if isinstance(work, list) else "call"
                measured = []
                for i in range(args.rounds):
                    if isinstance(work, list) and "--out" in work and i:
                        out = Path(work[work.index("--out") + 1])
                        shutil.rmtree(out, ignore_errors=True)
                        out.unlink(missing_ok=True)
                    measured.append(run_command(work) if isinstance(work, list) else run_call(work))
                seconds, mib = min(measured)
                points.append((n, seconds))
                print(f"{case.name:<13} {kind:<7} {n:>6,} {n * GPUS:>6,} {seconds:>8.2f} {mib:>7.0f}", flush=True)
            if len(points) > 1:
                print(
                    f"{case.name:<13} slope {slope(points):.2f} over {points[0][0]}-{points[-1][0]} nodes, "
                    f"{slope(points[-2:]):.2f} over {points[-2][0]}-{points[-1][0]}: {case.what}",
                    flush=True,
                )
    finally:
        if not args.keep:
            shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
