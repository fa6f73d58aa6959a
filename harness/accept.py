"""`bench accept`: after maintenance, one command and one verdict (docs/guides/accept.md).

1. The node check of every node and link (`bench nodes`), into DIR/nodes.
2. When it names nothing: the acceptance sweep narrowed to the keys the cluster profile's
   reference figures name (their workloads, node and GPU counts, collectives, groups, sizes and
   scaling modes), into DIR/sweep.
3. That sweep judged against the references (`bench regress --baseline reference`).
4. With `--soak MINUTES`, which soaks the node check's pairs that long: one job more, into
   DIR/soak, on the most nodes the references name, of the sweep's first collective at its
   largest size, timed window after window that long; its drift judged (docs/guides/accept.md,
   "Soak").

The verdict (DIR/verdict.json, DIR/report.html, the terminal's last line) passes only when the
check named nothing and judged everything, every job of the sweep completed, and every reference
was met: fail closed, so a step that did not run is a failure, never a pass. Exit status 0 when
accepted, 1 when a node, a link, a job or a reference failed, 3 when something could not be
judged, 2 for bad input, 130 when interrupted (what ran is kept, nothing is judged).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD, TRAINING, WORLD
from benchmarks.common import format_size, spread
from benchmarks.results import ResultError, load_result, read_regular
from harness import check_nodes, sweep
from harness.analysis import profile_reference
from harness.analysis.compare import FAILED, SLOWER, UNJUDGED
from harness.analysis.sides import load_run
from harness.analysis.store import Location
from harness.config import hostlists
from harness.config.cluster_profile import ClusterProfile, Reference
from harness.config.spec import DEFAULT_TIME_LIMIT_MIN, Sweep
from harness.config.sweepfile import load_sweep
from harness.errors import EXIT_FOUND, EXIT_INTERRUPTED, EXIT_UNJUDGED, RunDirError, UsageError
from harness.nodes.rounds import Options
from harness.nodes.soak import drift, ends
from harness.present import acceptance
from harness.present.regress import write_all
from harness.run import provenance
from harness.run.rundir import COMPLETED, RUN_FILE_LIMIT, RunDir

if TYPE_CHECKING:
    from rich.console import Console

    from harness.executors import Executor

NODES_DIR, SWEEP_DIR, SOAK_DIR = "nodes", "sweep", "soak"
MIN_WINDOWS = 3  # windows of the collective's soak it takes to judge a drift: a third of one each


def narrowing(refs: tuple[Reference, ...]) -> tuple[str, ...]:
    """The sweep overrides (`--set`) that keep the acceptance sweep to the keys `refs` name:
    exactly their node counts, their GPU counts where every reference states one, their
    workloads alone, and for the collectives their collectives, groups and the sizes from the
    smallest to the largest named (the sweep's step between them: a size off that ladder is a
    reference the run cannot judge, which fails the acceptance)."""
    out = [f"nodes=[{', '.join(str(n) for n in sorted({r.nodes for r in refs}))}]"]
    out.append(f"max_nodes={max(r.nodes for r in refs)}")
    gpus = {r.gpus_per_node for r in refs}
    if None not in gpus:
        out.append(f"gpus_per_node=[{', '.join(str(g) for g in sorted(g for g in gpus if g))}]")
    named = {r.workload for r in refs}
    out += [f"workloads.{w}=false" for w in (COLLECTIVE_WORKLOAD, *TRAINING) if w not in named]
    coll = [r for r in refs if r.workload == COLLECTIVE_WORKLOAD]
    if coll:
        collectives = sorted({r.collective or "all_reduce" for r in coll})
        groups = sorted({r.group or WORLD for r in coll} | {WORLD})
        sizes = [r.size for r in coll if r.size is not None]
        out += [
            f"workloads.allreduce.collectives=[{', '.join(collectives)}]",
            f"workloads.allreduce.groups=[{', '.join(groups)}]",
            f"workloads.allreduce.min_bytes={min(sizes)}",
            f"workloads.allreduce.max_bytes={max(sizes)}",
        ]
    for w in TRAINING:
        scalings = {r.scaling for r in refs if r.workload == w}
        if scalings and None not in scalings:
            out.append(f"workloads.{w}.scaling=[{', '.join(sorted(s for s in scalings if s))}]")
    return tuple(out)


def start(
    *,
    executor: type[Executor],
    profile: ClusterProfile,
    profile_path: str,
    sweep_path: Path,
    options: Options,
    threshold: float,
    nodelist: str | None,
    count: int | None,
    out: Path,
    console: Console,
    yes: bool,
    db: Location | None,
    dry_run: bool = False,
) -> int:
    refs = profile.reference
    if not refs:
        raise UsageError(
            f"{profile_path}: states no reference figures, which the acceptance sweep is judged against; add a "
            'reference: block (docs/concepts/expected.md, "Reference figures")'
        )
    if not executor.batch:
        count = count or check_nodes.LOCAL_NODES
        if (most := max(r.nodes for r in refs)) > count:
            raise UsageError(
                f"--nodes {count}: {profile_path} has a reference on {most} nodes; give --nodes {most} or more"
            )
    spec = load_sweep(sweep_path, overrides=narrowing(refs))
    if spec.device != "auto" and options.device == "auto":
        options = dataclasses.replace(options, device=spec.device, gemm=options.gemm and spec.device != "cpu")
    if spec.backend != "auto" and options.backend == "auto":
        options = dataclasses.replace(options, backend=spec.backend)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunDirError(f"{out}: exists and is not an empty directory; bench accept writes a new one")
    sweep.planned(spec, sweep_path, executor, profile)  # refused now, not after the node check has run
    soak = _soak_sweep(sweep_path, spec, refs, profile, options.soak_s) if options.soak_s else None
    if soak:
        sweep.planned(soak, sweep_path, executor, profile)
    console.print(f"bench accept: {len(refs)} reference figure(s) of {profile.name}, into {out}", markup=False)
    console.print("1. the node check", markup=False)
    status = check_nodes.start(
        executor=executor,
        profile=profile,
        options=options,
        threshold=threshold,
        count=count,
        nodelist=nodelist,
        time_limit_min=None,
        out=out / NODES_DIR,
        console=console,
        yes=yes,
        dry_run=dry_run,
        as_json=False,
        db=db,
    )
    if dry_run:  # both plans written, nothing submitted or started, nothing judged
        console.print(f"2. the acceptance sweep: {_keys(refs)}", markup=False)
        sweep.start(spec, sweep_path, executor, profile, out / SWEEP_DIR, console, dry_run=True, yes=yes)
        if soak:
            console.print(f"3. the soak: {_soaked(soak)}", markup=False)
            sweep.start(soak, sweep_path, executor, profile, out / SOAK_DIR, console, dry_run=True, yes=yes)
        console.print(f"bench accept: dry run, nothing submitted; the plans are in {out}", markup=False)
        return 0
    if status == EXIT_INTERRUPTED:
        return status  # Ctrl-C: what ran is kept in DIR/nodes, and nothing is judged
    found = _node_verdict(out / NODES_DIR)
    outcome = acceptance.Outcome(status, found)
    if status or not found:
        outcome.unjudged = status == EXIT_UNJUDGED or not found
        links = [" ".join(link["nodes"]) for link in found.get("links_named", [])]
        uplinks = ["uplink " + " - ".join(u["leaves"]) for u in found.get("uplinks_named", [])]
        named = ", ".join([*([found["drain"]] if found.get("drain") else []), *links, *uplinks])
        outcome.reasons.append(
            f"the node check named {named or 'the population'}"
            if status == EXIT_FOUND
            else "the node check could not judge every node and link"
        )
        outcome.reasons.append("the sweep did not run: drain what the check named, or mend it, and accept again")
    else:
        console.print(f"2. the acceptance sweep: {_keys(refs)}", markup=False)
        outcome.sweep_status = sweep.start(spec, sweep_path, executor, profile, out / SWEEP_DIR, console, yes=yes)
        if outcome.sweep_status == EXIT_INTERRUPTED:
            return EXIT_INTERRUPTED
        _judge(outcome, out, refs, profile.name)
        if soak:
            console.print(f"3. the soak: {_soaked(soak)}", markup=False)
            if sweep.start(soak, sweep_path, executor, profile, out / SOAK_DIR, console, yes=yes) == EXIT_INTERRUPTED:
                return EXIT_INTERRUPTED
            _judge_soak(outcome, out / SOAK_DIR, threshold)
    asked = nodelist if executor.batch else hostlists.hostlist(check_nodes.local_names(count or 0))
    acceptance.write(out, outcome, profile, provenance.record(), asked)
    console.print(f"bench accept: {outcome.line()}", markup=False, soft_wrap=True)
    console.print(f"report to sign: {out / acceptance.REPORT} (verdict.json beside it)", markup=False)
    return outcome.status


def _node_verdict(path: Path) -> dict[str, Any]:
    """The check's verdict.json, {} where the check wrote none (it did not run)."""
    try:
        data = json.loads(read_regular(path / "verdict.json", RUN_FILE_LIMIT))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _judge(outcome: acceptance.Outcome, out: Path, refs: tuple[Reference, ...], name: str) -> None:
    """The sweep's jobs and its rows against the references, into `outcome`."""
    run = RunDir(out / SWEEP_DIR)
    table = run.read_table(run.jobs())
    outcome.jobs = [(r.name, r.state, r.reason) for r in table.values()]
    lost = [j for j, state, _ in outcome.jobs if state != COMPLETED]
    if lost:
        outcome.reasons.append(f"{len(lost)} of {len(outcome.jobs)} sweep job(s) did not complete: {', '.join(lost)}")
    try:
        side = load_run(run.path)
    except (RunDirError, ValueError) as exc:
        outcome.reasons.append(f"the sweep has no summary to judge: {exc}")
        outcome.unjudged = True
        return
    outcome.environment = side.environment
    cmp = profile_reference.against_reference(side, refs, name)
    outcome.comparison = cmp
    write_all(cmp, out, "regress", f"bench accept: {side.label} against the reference of {name}")
    counts = cmp.counts()
    if counts[SLOWER] or counts[FAILED]:
        outcome.reasons.append(f"{counts[SLOWER] + counts[FAILED]} reference(s) not met")
    if counts[UNJUDGED]:
        outcome.reasons.append(f"{counts[UNJUDGED]} reference(s) could not be judged")
        outcome.unjudged = not (counts[SLOWER] or counts[FAILED] or lost)


def _keys(refs: tuple[Reference, ...]) -> str:
    parts = []
    for r in refs:
        what = (
            f"{r.collective or 'all_reduce'} {format_size(r.size or 0)}"
            if r.workload == COLLECTIVE_WORKLOAD
            else f"{r.workload} {r.scaling or ''}".strip()
        )
        parts.append(f"{what} on {r.nodes}x{r.gpus_per_node or '*'}")
    return "; ".join(parts)


def _soak_sweep(
    sweep_path: Path, spec: Sweep, refs: tuple[Reference, ...], profile: ClusterProfile, seconds: float
) -> Sweep:
    """The soak's sweep: one job, on the most nodes the references name and the most GPUs the
    acceptance sweep runs, of its first collective (the sweep file's, where no reference names
    one) on the world at its largest size, `seconds` long, with the job's time limit that much
    longer; the first launcher and settings set only."""
    coll = spec.workloads.allreduce or load_sweep(sweep_path).workloads.allreduce
    if coll is None:
        raise UsageError(f"--soak: {sweep_path} measures no collective to soak; enable workloads.allreduce in it")
    nodes = max(r.nodes for r in refs)
    limit = spec.time_limit_min or profile.time_limit_min or DEFAULT_TIME_LIMIT_MIN
    overrides = (
        f"nodes=[{nodes}]",
        f"max_nodes={nodes}",
        f"gpus_per_node=[{max(spec.gpus_per_node)}]",
        "repeat=1",
        f"time_limit_min={limit + seconds / 60:g}",
        *(f"workloads.{w}=false" for w in TRAINING),
        f"workloads.allreduce.collectives=[{coll.collectives[0]}]",
        f"workloads.allreduce.groups=[{WORLD}]",
        f"workloads.allreduce.min_bytes={coll.max_bytes}",
        f"workloads.allreduce.max_bytes={coll.max_bytes}",
        "workloads.allreduce.link_bytes=0",
        f"workloads.allreduce.soak_s={seconds:g}",
    )
    only = (f"launcher={spec.launchers[0]}", f"nccl={next(iter(spec.nccl))}")
    return load_sweep(sweep_path, overrides=overrides, only=only)


def _soaked(soak: Sweep) -> str:
    """What the soak runs, in words."""
    coll = soak.workloads.allreduce
    assert coll is not None
    nodes, gpus = soak.node_counts[-1], soak.gpus_per_node[0]
    return (
        f"{coll.collectives[0]} {format_size(coll.max_bytes)} on {nodes} node(s) x {gpus} GPU(s),"
        f" {coll.soak_s / 60:g} min, window after window"
    )


def _judge_soak(outcome: acceptance.Outcome, path: Path, threshold: float) -> None:
    """The soak's job and its windows, into `outcome`: fewer than MIN_WINDOWS, or a result that
    cannot be read, is not judged; a drift (harness/nodes/soak.py) below 1 - threshold fails."""
    run = RunDir(path)
    jobs = run.jobs()
    table = run.read_table(jobs)
    job = jobs[0]
    record = table[job.name]
    if record.state != COMPLETED:
        outcome.reasons.append(f"the soak's job {job.name} did not complete: {record.reason or record.state}")
        return
    result = path / job.result_path(job.runs[0])
    try:  # a result file is data, not trusted: every figure read is checked
        found = load_result(result)["soak"]
        what = f"{found['collective']} {format_size(int(found['size_bytes']))} on {job.nodes} node(s)"
        seconds, windows = float(found["seconds"]), [float(w[2]) for w in found["windows"]]
    except (ResultError, KeyError, IndexError, TypeError, ValueError) as exc:
        outcome.reasons.append(f"the soak's result {result} cannot be read: {type(exc).__name__} {exc}")
        outcome.unjudged = True
        return
    if len(windows) < MIN_WINDOWS or not all(math.isfinite(b) and b >= 0 for b in windows):
        outcome.reasons.append(
            f"the soak: {len(windows)} window(s) of readable figures in {result}; a drift takes {MIN_WINDOWS}"
        )
        outcome.unjudged = True
        return
    first, last = ends(windows)
    outcome.soak = {
        "job": job.name,
        "what": what,
        "seconds": seconds,
        "windows": len(windows),
        "first_gbps": first,
        "last_gbps": last,
        "drift": drift(windows),
        **spread(windows),
    }
    s = outcome.soak
    if s["drift"] < 1 - threshold:
        outcome.reasons.append(
            f"the soak of {what} read {1 - s['drift']:.0%} lower at its end than at its start"
            f" (busbw {s['first_gbps']:.3g} GB/s over its first third, {s['last_gbps']:.3g} over its last)"
        )
