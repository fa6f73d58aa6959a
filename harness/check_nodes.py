"""`bench nodes`: check every node and every link of a partition (or of emulated nodes on this
machine), then name what to drain (docs/guides/nodes.md). Plan the check into a new run directory,
run it (one Slurm job, or the local driver), judge, write the verdict's files and print it.

The exit status: 0 when nothing is named, 1 when a node, a link or the whole population is
named, 3 when nothing is named but part of the check could not be judged (fail closed: a check
that did not run says so), 2 for bad input, 130 when interrupted.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness import executors
from harness.analysis import nodehistory
from harness.analysis.store import Location
from harness.config import hostlists, topology
from harness.config.cluster_profile import TOPOLOGY_SLURM, ClusterProfile
from harness.config.fields import FieldError, build
from harness.config.hostlists import HOSTLIST_RE, NODE_NAME_RE
from harness.errors import EXIT_FOUND, EXIT_UNJUDGED, HistoryError, RunDirError, SlurmError, UsageError, shown
from harness.executors import Executor
from harness.executors.slurm.check_job import check_job
from harness.nodes.driver import FOLDER, PLAN, RECORD, Driver, LocalLauncher, Plan, load_plan
from harness.nodes.judged import judge_check, low_links
from harness.nodes.rounds import Options, Round, schedule, tournament
from harness.nodes.verdict import Verdict, drain_command
from harness.present import node_report
from harness.run.cost import Cost
from harness.run.rundir import COMPLETED, RunDir, claim, locked
from harness.sweep import confirm, execute

if TYPE_CHECKING:
    from rich.console import Console

# Node states that cannot join the check's allocation (sinfo(1), NODE STATE CODES).
UNUSABLE = ("down", "drain", "drng", "fail", "failg", "maint", "resv", "boot", "futr", "inval", "npc", "powered", "pow")
_CALL_TIMEOUT_S = 60
LOCAL_NODES = 4  # the local executor's emulated nodes when --nodes is not given


@dataclass(frozen=True)
class CheckCost(Cost):
    """What the check's one job can cost, as `bench sweep` shows a sweep's (docs/concepts/cost.md): the
    bound, and the rounds at a round's seconds where some source states them."""

    nodes: int = 0
    rounds: int = 0
    round_s: float | None = None
    source: str = ""  # where round_s came from

    @classmethod
    def of(cls, nodes: int, rounds: int, o: Options, limit_min: float, round_s: float | None, source: str) -> CheckCost:
        bound = nodes * limit_min / 60
        least = nodes * rounds * (round_s or 0.0) / 3600
        gpus = o.gpus_per_node
        return cls(1, limit_min, bound, bound * gpus, least, least * gpus, (), nodes, rounds, round_s, source)

    def lines(self) -> list[str]:
        head = (
            f"cost: 1 job of {self.nodes} nodes, at most {self.bound_node_hours:,.1f} node-hours "
            f"({self.bound_gpu_hours:,.1f} GPU-hours) if it runs to its {self.time_limit_min:g}-min time limit"
        )
        if self.round_s is None:
            return [
                head,
                f"  {self.rounds} rounds: no estimate of their time; state node_check_round_s in the profile, or "
                'add a check of this cluster to the history (docs/guides/nodes.md, "Cost")',
            ]
        hours = self.rounds * self.round_s / 3600
        return [
            head,
            f"  {self.rounds} rounds: {hours:,.2f} h, {self.estimate_node_hours:,.1f} node-hours, "
            f"at {self.round_s:g} s a round ({self.source})",
        ]


def round_time(profile: ClusterProfile | None, db: Location | None) -> tuple[float | None, str]:
    """(seconds a round takes, where that came from): the profile's node_check_round_s, else the
    median round of the newest check of the profile's cluster in the history, else none."""
    if profile and profile.node_check_round_s:
        return profile.node_check_round_s, "the profile's node_check_round_s"
    if profile and db:
        try:
            last = nodehistory.last_round_s(db, profile.name)
        except HistoryError as exc:
            return None, f"the history is unreadable: {exc}"
        if last:
            seconds, entry = last
            return seconds, f"the median round of node check {entry.id} of {profile.name} in {db}, {entry.created}"
    return None, ""


def _call(command: list[str]) -> str:
    try:
        p = subprocess.run(command, capture_output=True, text=True, timeout=_CALL_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise UsageError(f"{command[0]} not found on PATH; the Slurm executor needs Slurm's client commands") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{command[0]} gave no answer in {_CALL_TIMEOUT_S} s") from None
    if p.returncode != 0:
        said = [line.strip() for line in (p.stderr or p.stdout).splitlines() if line.strip()]
        raise UsageError(f"{' '.join(command)}: {said[-1] if said else f'exit status {p.returncode}'}")
    return p.stdout


def expand(nodelist: str) -> list[str]:
    """The names of a hostlist, as Slurm expands them (`scontrol show hostnames`), without Slurm:
    a dry run plans a check off the cluster."""
    if not HOSTLIST_RE.fullmatch(nodelist):
        raise UsageError(f"--nodelist {nodelist!r} is not a Slurm hostlist (names, [ranges], commas)")
    try:
        return list(dict.fromkeys(hostlists.expand_hostlist(nodelist)))
    except ValueError as exc:
        raise UsageError(f"--nodelist: {exc}") from None


def partition_nodes(profile: ClusterProfile) -> list[str]:
    """The nodes of the profile's partition (Slurm's default partition when it names none) that
    can join an allocation: not down, drained, failing, in maintenance or reserved."""
    command = ["sinfo", "-h", "-N", "-o", "%N|%t", *(["-p", profile.partition] if profile.partition else [])]
    names = []
    for line in _call(command).splitlines():
        name, _, state = line.strip().partition("|")
        if name and not state.rstrip("*~#!%$@^-").lower().startswith(UNUSABLE) and NODE_NAME_RE.fullmatch(name):
            names.append(name)
    return list(dict.fromkeys(names))


def start(
    *,
    executor: type[Executor],
    profile: ClusterProfile | None,
    options: Options,
    threshold: float,
    count: int | None,
    nodelist: str | None,
    time_limit_min: float | None,
    out: Path,
    console: Console,
    yes: bool,
    dry_run: bool,
    as_json: bool,
    db: Location | None = None,
) -> int:
    """`bench nodes`: plan the check of the nodes asked for, run it here or as one Slurm job, and
    report its verdict (docs/guides/nodes.md)."""
    batch = executor.batch
    names, nodelist = _nodes_to_check(batch, profile, count, nodelist)
    if profile and profile.topology:
        profile = _with_leaves(profile, names, batch and not dry_run, console)
    if options.partners is not None and options.partners >= tournament(len(names)):
        options = dataclasses.replace(options, partners=None)  # as many as every pair
    if options.reference and not batch:
        raise UsageError("--reference names Slurm nodes; the local executor's nodes are local0..localN-1")
    plan = Plan(
        executor.name,
        options,
        threshold,
        len(names),
        nodelist,
        dataclasses.asdict(profile) if profile and batch else None,
    )
    leaf_of = profile.leaf_of() if profile else {}
    try:
        rounds = schedule(names, options, leaf_of)
    except ValueError as exc:
        raise UsageError(f"--reference: {exc}") from None
    if batch:
        executor.check_jobs([check_job(plan, time_limit_min)], "--time-limit")
    _announce(console, names, options, rounds, leaf_of)
    run, _ = claim(out)
    with locked(run):
        plan.write(run.path)
        if not batch and dry_run:  # a dry run never runs, on any executor
            console.print(f"dry run: nothing ran; the check's plan is in {run.path / PLAN}", markup=False)
            return 0
        if batch:
            assert profile is not None
            return _on_slurm(executor, run, plan, profile, rounds, time_limit_min, db, console, yes, dry_run, as_json)
        try:
            low = functools.partial(low_links, run.path, plan, profile)
            driver = Driver(run.path, FOLDER, names, options, LocalLauncher(run.path, options), low, leaf_of)
            driver.drive(lambda line: console.print(line, markup=False))
        except KeyboardInterrupt:
            console.print(f"\ninterrupted: the steps were ended; {run.path} keeps what ran", markup=False)
            return 130
        return report(run, plan, profile, console, as_json)


def local_names(count: int) -> list[str]:
    """The names of the local executor's `count` emulated nodes."""
    return [f"local{i}" for i in range(count)]


def _nodes_to_check(
    batch: bool, profile: ClusterProfile | None, count: int | None, nodelist: str | None
) -> tuple[list[str], str | None]:
    """The nodes' names, and their hostlist on Slurm: `count` emulated nodes here; the nodelist,
    or the profile's partition, on Slurm. Fewer than 2 is bad input."""
    if not batch:
        if nodelist:
            raise UsageError("--nodelist names Slurm nodes; the local executor emulates --nodes N on this machine")
        names = local_names(count or LOCAL_NODES)
    else:
        names = expand(nodelist) if nodelist else partition_nodes(profile or ClusterProfile(name="default"))
        if count is not None:
            raise UsageError("--nodes counts emulated nodes of the local executor; on Slurm give --nodelist")
        where = f"--nodelist {nodelist}" if nodelist else f"partition {profile.partition if profile else '(default)'}"
        if not names:
            raise UsageError(f"{where}: no node that can join an allocation")
        nodelist = hostlists.hostlist(names)
    if len(names) < 2:
        raise UsageError(f"the check needs at least 2 nodes, found {len(names)}: {', '.join(names)}")
    return names, nodelist


TOPOLOGY_MAX_BYTES = 16 * 1024**2  # a topology.conf of every switch of a large fabric, with room


def _with_leaves(profile: ClusterProfile, names: list[str], on_slurm: bool, console: Console) -> ClusterProfile:
    """The profile with the leaves its `topology:` names read in, as the plan records them
    (docs/guides/nodes.md, "Leaves"): from `scontrol show topology` on Slurm (not on a dry run,
    which may plan off the cluster), or from the topology.conf it names. A topology that cannot
    be read or states no leaf is bad input: a check the profile asks to judge by its leaves is not
    judged without them."""
    source = profile.topology
    assert source is not None
    if source == TOPOLOGY_SLURM:
        if not on_slurm:
            console.print("leaves: read from `scontrol show topology` when the check runs on Slurm", markup=False)
            return profile
        source = "scontrol show topology"
        text = _call(["scontrol", "show", "topology"])
    else:
        try:
            with open(source, "rb") as f:
                raw = f.read(TOPOLOGY_MAX_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"the profile's topology: {source}: {exc.strerror or exc}") from None
        if len(raw) > TOPOLOGY_MAX_BYTES:
            raise UsageError(f"the profile's topology: {source}: larger than {TOPOLOGY_MAX_BYTES // 1024**2} MiB")
        text = raw.decode(errors="replace")
    try:
        with_leaves = dataclasses.replace(profile, leaves=topology.leaves_of(text), topology=None)
    except (ValueError, FieldError) as exc:
        raise UsageError(f"the profile's topology: {source}: {exc}") from None
    checked = set(names)
    under = [(leaf.name, len(checked.intersection(leaf.hosts()))) for leaf in with_leaves.leaves]
    alone = len(checked) - sum(n for _, n in under)
    console.print(
        f"leaves from {source}: "
        + (", ".join(f"{name} ({n} nodes)" for name, n in under if n) or "none over the nodes checked")
        + (f"; {alone} node(s) under no leaf, judged as without leaves" if alone else ""),
        markup=False,
    )
    return with_leaves


def _announce(
    console: Console, names: list[str], options: Options, rounds: list[Round], leaf_of: Mapping[str, str]
) -> None:
    """The check's first line: its nodes, steps and rounds, and how pairs are chosen."""
    steps = sum(len(members) for _, members in rounds)
    by_leaf = ""
    if leaf_of and options.partners:  # the K rounds by leaf (rounds.leaf_rounds), not every pair's
        crossing = [
            any(leaf_of.get(names[a]) != leaf_of.get(names[b]) for a, b in members)
            for kind, members in rounds
            if kind == "pair"
        ]
        by_leaf = f", by leaf: {crossing.count(False)} round(s) under the leaves, {crossing.count(True)} across"
    console.print(
        f"node check: {len(names)} nodes x {options.gpus_per_node} rank(s), {steps} steps in {len(rounds)} rounds"
        + (
            f" ({options.partners} partners per node{by_leaf})"
            if options.partners
            else f" (each node against one of {len(options.reference)} reference nodes)"
            if options.reference
            else " (every pair)"
        )
        + (
            f"; each pair again on each of {len(options.rails)} rails alone "
            f"({', '.join(r.name for r in options.rails)})"
            if options.rails
            else ""
        ),
        markup=False,
    )


def _on_slurm(
    executor: type[Executor],
    run: RunDir,
    plan: Plan,
    profile: ClusterProfile,
    rounds: list[Round],
    time_limit_min: float | None,
    db: Location | None,
    console: Console,
    yes: bool,
    dry_run: bool,
    as_json: bool,
) -> int:
    """The check as one job: its scripts written, its cost confirmed, submitted and tracked to
    its end, and its verdict reported; a job that left no record is "cannot judge"."""
    options = plan.options
    job = check_job(plan, time_limit_min)
    exe = executors.NODE_CHECKS[executor.name](run, options.timeout_s, profile, plan)
    run.write_job_files([job], exe.job_files)
    confirm(
        CheckCost.of(plan.nodes, len(rounds), options, job.time_limit_min, *round_time(profile, db)),
        profile,
        console,
        dry_run=dry_run,
        yes=yes,
    )
    if dry_run:
        console.print(f"dry run: nothing submitted; the job's scripts are in {run.path}/{FOLDER}/", markup=False)
        return 0
    table = run.read_table([job])
    try:
        execute(run, exe, [job], table, console)
    except KeyboardInterrupt:
        console.print(f"\ninterrupted ({exe.interrupt_note}): {run.path}", markup=False)
        return 130
    rec = table[job.name]
    if rec.state != COMPLETED:
        console.print(f"[red]the check's job ended {rec.state}[/]: {shown(rec.reason or '')}", soft_wrap=True)
    if not (run.path / FOLDER / RECORD).exists():
        console.print(f"[red]the check's job wrote no {RECORD}[/]: no node or link is judged", soft_wrap=True)
        return EXIT_UNJUDGED
    try:
        return report(run, plan, profile, console, as_json)
    except ValueError as exc:  # the record the job just wrote, damaged: nothing judged, not bad input
        console.print(f"[red]the check's record cannot be read[/]: {shown(exc)}", soft_wrap=True)
        return EXIT_UNJUDGED


def checked(path: Path) -> tuple[Plan, ClusterProfile | None]:
    """The plan of the check in `path` and the cluster profile it recorded, every value
    checked (a run directory is untrusted data); RunDirError says what is wrong."""
    if not (path / PLAN).is_file():
        raise RunDirError(f"{path}: no {PLAN}; not the run directory of a node check")
    try:
        plan = load_plan(path)
        if plan.executor not in executors.NAMES:
            raise ValueError(
                f"{path / PLAN}: executor must be one of {', '.join(executors.NAMES)}, found {plan.executor!r}"
            )
        return plan, build(ClusterProfile, plan.cluster, "cluster") if plan.cluster else None
    except ValueError as exc:
        raise RunDirError(str(exc)) from None
    except FieldError as exc:
        raise RunDirError(f"{path / PLAN}: cluster.{exc.key}: {exc}") from None


def judge_again(path: Path, threshold: float | None, console: Console, as_json: bool) -> int:
    """`bench nodes --report DIR`: the verdict of a check that ran, with its plan's threshold or
    `threshold`; the plan, record and results are read as untrusted data."""
    plan, profile = checked(path)
    if threshold is not None:
        plan = dataclasses.replace(plan, threshold=threshold)
    run = RunDir(path)
    with locked(run):
        return report(run, plan, profile, console, as_json)


def verdict_of(path: Path) -> Verdict:
    """The verdict of the check in `path`, as its plan judges it (`bench history add`)."""
    plan, profile = checked(path)
    return judge_check(path, plan, profile)[0]


def report(run: RunDir, plan: Plan, profile: ClusterProfile | None, console: Console, as_json: bool) -> int:
    """Judge the check in `run`, write its files, print the verdict; the exit status."""
    verdict, record = judge_check(run.path, plan, profile)
    node_report.write_outputs(run.path, verdict, record, plan)
    if as_json:
        json.dump(node_report.as_json(verdict, record, plan), sys.stdout, indent=2)
        print()
    else:
        node_report.print_verdict(console, verdict, record)
        if verdict.drain:
            console.print(f"[red]drain:[/] {verdict.drain}", soft_wrap=True)
            console.print(
                f"  {drain_command(verdict.drain, f'bench nodes: {run.path.name}')}", markup=False, soft_wrap=True
            )
        console.print(f"results: {run.path} (verdict.json, nodes.csv, pairs.csv, heatmap.png, drain.txt)", markup=False)
    if verdict.named:
        return EXIT_FOUND
    return EXIT_UNJUDGED if verdict.unjudged else 0
