"""Running the node check's steps (harness/nodes/rounds.py), round after round, each round's steps
at once: inside one Slurm allocation of every node, where each step is an srun step on its one
or two nodes (`python -m harness.nodesteps DIR`, which the check's batch script runs), or on
this machine, where each emulated node is a torchrun agent as in the local executor.

A step that fails or outlives the step timeout is recorded and the check goes on: a dead node
fails its steps, and the verdict names it, rather than ending the check. After each round its
steps' record (`rounds/K.json` in the check's folder) and then `steps.json` (the nodes, the
rounds that ran and each one's seconds) are replaced atomically (docs/guides/nodes.md, "The record").
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from benchmarks.catalog import BACKENDS, DEVICES
from benchmarks.results import RESULT_LIMIT, json_bytes, read_regular
from harness.config.cluster_profile import Rail
from harness.config.fields import FieldError
from harness.config.hostlists import HOSTLIST_RE, NODE_NAME_RE
from harness.evidence import dcgm
from harness.evidence.faults import FOLDER as FAULTS
from harness.evidence.logs import error_line, tail
from harness.files import inside
from harness.nodes import rounds as node_rounds
from harness.nodes.rounds import Options, Step
from harness.run.procs import TAG, agent_command, die_with_parent, free_port, kill_groups, new_tag
from harness.run.rundir import CANCELLED, COMPLETED, FAILED, TIMEOUT, now

PLAN = "check.json"  # in the run directory: what `bench nodes` asked for
JOB = "nodes"  # the check's job, in the run directory's jobs/
FOLDER = f"jobs/{JOB}"  # its folder: the Slurm job's files, the record and the steps' results
PLAN_VERSION = 1
RECORD = "steps.json"
ROUNDS_DIR = "rounds"  # in the check's folder: <k>.json, the steps of round k
RECORD_VERSION = 1
STEP_SCRIPT = "step.sh"  # the srun line of a step, rendered by harness/executors/slurm/check_job.py
# The tasks a node of a step, where not one a rank (Step.tasks): a plain step's, a rail's.
# An environment variable, not an argument, so that a driver and a step script of two bench
# versions (a check queued across an upgrade) still agree on the arguments.
STEP_TASKS = "BENCH_STEP_TASKS"
STEP_MINUTES = "BENCH_STEP_MINUTES"  # a step's srun --time where it is not the step timeout: DCGM's
_POLL_S = 0.05
_GRACE_S = 30.0  # past the step timeout before the driver ends a step Slurm's --time did not
FAULTS_TIMEOUT_S = 60.0  # for every node's reading of its faults: a few small files and dmesg


@dataclass
class Running:
    step: Step
    procs: list[subprocess.Popen]
    log: BinaryIO
    started: float
    tag: str  # in the environment of the step's local processes (procs.TAG)


class Launcher:
    """Starts one step's processes, from the run directory."""

    grace_s = 0.0  # past the step timeout before the driver ends a step

    def start(self, step: Step, names: Sequence[str], index: int, log: BinaryIO, tag: str) -> list[subprocess.Popen]:
        raise NotImplementedError


class LocalLauncher(Launcher):
    """Each node of a step is a torchrun agent on this machine (harness/run/procs.py)."""

    def __init__(self, run: Path, options: Options):
        self.run, self.options = run, options

    def start(self, step: Step, names: Sequence[str], index: int, log: BinaryIO, tag: str) -> list[subprocess.Popen]:
        if step.plain:  # one process a node, no torchrun agent
            command = [sys.executable, "-m", step.module, *step.args]
            env = {**os.environ, TAG: tag}
            return [_popen(command, self.run, {**env, "BENCH_NODE": names[n]}, log) for n in step.nodes]
        port = free_port()
        procs = []
        for k, node in enumerate(step.nodes):
            nnodes, nproc = len(step.nodes), step.tasks or self.options.gpus_per_node
            command = agent_command(nnodes, nproc, k, port, step.name, step.module, step.args)
            env = {
                **os.environ,
                **dict(step.env),
                "BENCH_LAUNCHER": "local-torchrun",
                "BENCH_NODE": names[node],
                TAG: tag,
            }
            procs.append(_popen(command, self.run, env, log))
        return procs


class SrunLauncher(Launcher):
    """Each step is an srun step of the allocation on its nodes, through the rendered step
    script: `bash step.sh NAME NODES NNODES PORT MODULE ARGS...`, its values as arguments, never
    as shell text. The rendezvous port is derived from the job id and the step's index, so
    steps that follow one another on a node do not meet a port still in TIME_WAIT."""

    grace_s = _GRACE_S  # srun's --time ends the step first, as Slurm's clock sees it

    def __init__(self, run: Path, folder: str, job_id: int):
        self.run, self.script, self.job_id = run, f"{folder}/{STEP_SCRIPT}", job_id

    def start(self, step: Step, names: Sequence[str], index: int, log: BinaryIO, tag: str) -> list[subprocess.Popen]:
        # srun's processes are left untagged: on a node, its tasks are Slurm's to end
        port = 20000 + (self.job_id % 20000 + index) % 40000
        nodes = ",".join(names[i] for i in step.nodes)
        command = ["bash", self.script, step.name, nodes, str(len(step.nodes)), str(port), step.module, *step.args]
        env = {k: v for k, v in os.environ.items() if k not in (STEP_TASKS, STEP_MINUTES)} | dict(step.env)
        if step.tasks:
            env[STEP_TASKS] = str(step.tasks)
        if step.limit_s:
            env[STEP_MINUTES] = str(math.ceil(step.limit_s / 60))
        return [_popen(command, self.run, env, log)]


def _popen(command: list[str], cwd: Path, env: dict[str, str], log: BinaryIO) -> subprocess.Popen:
    # A session of its own, so that a step is ended with its whole process group.
    return subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,  # noqa: PLW1509
    )


class Driver:
    """Runs a check's rounds and keeps its record (see the module's docstring)."""

    def __init__(
        self,
        run: Path,
        folder: str,
        names: list[str],
        options: Options,
        launcher: Launcher,
        low_links: Callable[[], Sequence[tuple[str, int, int]]] | None = None,
        leaf_of: Mapping[str, str] | None = None,
    ):
        """`low_links`: the links the record so far would name for a low figure, each (the kind
        of round it ran in, node a, node b by index), asked once the plan's rounds have run;
        they are measured again in one more round (docs/guides/nodes.md, "Measured again").
        `leaf_of`: the nodes' leaves, which the plan's pairs follow (rounds.schedule)."""
        self.run, self.folder, self.names, self.options, self.launcher = run, folder, names, options, launcher
        self.low_links = low_links
        self.plan = node_rounds.schedule(names, options, leaf_of)
        self.steps: dict[str, dict[str, Any]] = {}  # the running round's
        self.round_s: list[float] = []
        self.again = 0  # rounds run after the plan's: 1 once the links that read low are measured again
        self.soak = 0  # the soak's rounds begun, after those (docs/guides/nodes.md, "Soak")

    def save(self, k: int | None = None) -> None:
        """The record: round `k`'s steps (rounds/<k>.json), then steps.json, which says how many
        rounds ended and how long each took; each file replaced atomically."""
        # through the run directory's writer (harness/files/inside.py): the shared directory is
        # untrusted while the job waits in the queue, and a planted link is refused, not followed
        folder = PurePosixPath(self.folder)
        if k is not None:
            inside.write(self.run, folder / ROUNDS_DIR / f"{k}.json", json_bytes(self.steps))
        summary = {"format_version": RECORD_VERSION, "hosts": self.names, "rounds": len(self.plan), "again": self.again}
        record = {**summary, "soak": self.soak, "round_s": self.round_s, "ran": len(self.round_s)}
        inside.write(self.run, folder / RECORD, json_bytes(record))

    def drive(self, progress: Callable[[str], None] = lambda line: None) -> None:
        for sub in (node_rounds.STEPS_DIR, ROUNDS_DIR, FAULTS, *([dcgm.FOLDER] if self.options.dcgm else [])):
            inside.mkdir(self.run, PurePosixPath(self.folder) / sub)
        self.save()
        self._read_faults("before", progress)
        if self.options.dcgm:  # DCGM's diagnostic, before the rounds load the GPUs (harness/evidence/dcgm.py)
            level = self.options.dcgm
            step = node_rounds.dcgm_step(len(self.names), level, self.folder)
            if not self._on_each_node(step, step.limit_s or dcgm.TIMEOUT_S[level]):
                progress(f"DCGM's diagnostic (level {level}) failed on some node: see {self.folder}/{step.log}")
        index = 0
        for k, round_ in enumerate(self.plan):
            index = self._round(k, node_rounds.steps(round_, self.options, self.folder), index, progress)
        if self.low_links:
            try:
                links = self.low_links()
            except ValueError as exc:  # the record just written, unreadable: the verdict will say so
                progress(f"the links that read low are not measured again: {exc}")
            else:
                index = self._measure_again(links, index, progress)
        if self.options.soak_s:
            self._soak(index, progress)
        self._read_faults("after", progress)

    def _round(
        self, k: int, steps: list[Step], index: int, progress: Callable[[str], None], what: str | None = None
    ) -> int:
        """Round `k`, of `steps`, run and recorded, and said to be `what` (else the plan's round
        k, or the links measured again); the next step's index."""
        self.steps = {}
        start = time.monotonic()
        width = self.options.concurrency or len(steps)
        try:
            for batch in range(0, len(steps), width):
                index = self._run(steps[batch : batch + width], index)
        except BaseException:
            self.round_s.append(round(time.monotonic() - start, 3))
            self.save(k)
            raise
        self.round_s.append(round(time.monotonic() - start, 3))
        self.save(k)
        failed = [s.name for s in steps if self.steps[s.name]["state"] != COMPLETED]
        plan = f"{k + 1} of {len(self.plan)}" if k < len(self.plan) else f"{k + 1}, the links that read low, again"
        of = what or plan
        progress(
            f"round {of}: {len(steps)} step(s) in {self.round_s[-1]:.1f} s"
            + (f", failed: {' '.join(failed)}" if failed else "")
        )
        return index

    def _measure_again(self, links: Sequence[tuple[str, int, int]], index: int, progress: Callable[[str], None]) -> int:
        """`links`, which the rounds so far name for a low figure, measured once more, those that
        share no node at once: a link is named only when both its readings are low, so that a
        pair slowed while it ran (another job's traffic, emulated nodes sharing CPUs) is not.
        The next step's index."""
        steps = [s for r in node_rounds.again_rounds(links) for s in node_rounds.steps(r, self.options, self.folder)]
        if not steps:
            return index
        if len(steps) < len(links):
            progress(f"{len(links) - len(steps)} of {len(links)} low links share a node with another: one reading")
        self.again = 1
        return self._round(len(self.plan), steps, index, progress)

    def _soak(self, index: int, progress: Callable[[str], None]) -> None:
        """The soak (docs/guides/nodes.md, "Soak"): whole passes of the plan's pairs
        (node_rounds.soak_pass), each begun while its seconds have not yet passed since the
        soak began, so that every link is measured as often as every other."""
        start = time.monotonic()
        p = 0
        while time.monotonic() - start < self.options.soak_s:
            p += 1
            passing = node_rounds.soak_pass(self.plan, p)
            for j, round_ in enumerate(passing):
                k = len(self.plan) + self.again + self.soak
                self.soak += 1  # begun: an interrupted round is counted among those that ran
                what = f"{k + 1}, the soak's pass {p}, {j + 1} of {len(passing)}"
                index = self._round(k, node_rounds.steps(round_, self.options, self.folder), index, progress, what)
        progress(f"the soak: {p} pass(es) of the pairs in {time.monotonic() - start:.1f} s")

    def _read_faults(self, when: str, progress: Callable[[str], None]) -> None:
        """Every node's reading of its hardware faults (node_rounds.fault_step), outside the
        rounds' record: a node whose reading is missing is not judged by it, and the verdict
        says so (harness/evidence/faults.py)."""
        step = node_rounds.fault_step(len(self.names), when, self.folder)
        if not self._on_each_node(step, FAULTS_TIMEOUT_S):
            progress(f"reading the nodes' hardware faults {when} the check failed: see {self.folder}/{step.log}")

    def _on_each_node(self, step: Step, timeout_s: float) -> bool:
        """Run `step`, a program on every node, outside the rounds' record, for at most
        `timeout_s`; whether every node's ended well. What each node's program writes is read by
        the verdict, which says where it is missing."""
        log = inside.append(self.run, PurePosixPath(self.folder) / step.log)
        tag, procs = new_tag(), []
        try:
            procs = self.launcher.start(step, self.names, 0, log, tag)
            deadline = time.monotonic() + timeout_s + self.launcher.grace_s
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(_POLL_S)
        finally:
            kill_groups(procs, tag)
            log.close()
        return all(p.returncode == 0 for p in procs)

    def _run(self, steps: list[Step], index: int) -> int:
        """Run `steps` at once to their end; the next step's index."""
        running: list[Running] = []
        try:
            for step in steps:
                inside.remove(self.run, PurePosixPath(self.folder) / step.result)  # an earlier attempt's
                log = inside.append(self.run, PurePosixPath(self.folder) / step.log)
                self.steps[step.name] = {"state": "RUNNING", "started": now()}
                tag = new_tag()
                procs = self.launcher.start(step, self.names, index, log, tag)
                running.append(Running(step, procs, log, time.monotonic(), tag))
                index += 1
            self._wait(running)
        except BaseException:
            for r in running:
                kill_groups(r.procs, r.tag)
                if self.steps[r.step.name]["state"] == "RUNNING":
                    self._record(r, CANCELLED, None, "interrupted")
            raise
        finally:
            for r in running:
                r.log.close()
        return index

    def _wait(self, running: list[Running]) -> None:
        limit = self.options.step_timeout_s
        left = list(running)
        while left:
            for r in list(left):
                codes = [p.poll() for p in r.procs]
                if any(c not in (None, 0) for c in codes) and any(c is None for c in codes):
                    # one agent failed: the others are ended rather than left to their timeout
                    kill_groups(r.procs, r.tag)
                    codes = [p.returncode for p in r.procs]
                if all(c is not None for c in codes):
                    left.remove(r)
                    bad = [c for c in codes if c != 0]
                    result = self.run / self.folder / r.step.result
                    if not bad and result.exists():
                        self._record(r, COMPLETED, 0, None)
                    else:
                        text = tail(self.run / self.folder / r.step.log, lines=400)
                        lines = [line for line in text.splitlines() if line.strip()]
                        why = error_line(text) or (lines[-1].strip() if lines else None)
                        code = bad[0] if bad else 0
                        self._record(r, FAILED, code, why or f"exit status {code}" + ("" if bad else ", no result"))
                elif time.monotonic() - r.started > limit + self.launcher.grace_s:
                    left.remove(r)
                    kill_groups(r.procs, r.tag)
                    self._record(r, TIMEOUT, None, f"still running after the step timeout of {limit:g} s")
            time.sleep(_POLL_S)

    def _record(self, r: Running, state: str, code: int | None, reason: str | None) -> None:
        self.steps[r.step.name].update(
            state=state, exit_code=code, elapsed_s=round(time.monotonic() - r.started, 3), reason=reason
        )


def read_record(folder: Path, with_rounds: bool = True) -> dict[str, Any]:
    """A check's record, checked for the shape this module writes (a run directory is untrusted
    data): steps.json, with "steps", every round's step records that ran, merged (without
    `with_rounds`, steps.json alone); ValueError says what is wrong."""
    path = folder / RECORD
    data = load_json(path)
    if data.get("format_version") != RECORD_VERSION:
        raise ValueError(f"{path}: format_version required {RECORD_VERSION}, found {data.get('format_version')!r}")
    hosts, rounds, ran, rs = data.get("hosts"), data.get("rounds"), data.get("ran"), data.get("round_s")
    again = data.setdefault("again", 0)  # absent from the records of checks before it ran
    soak = data.setdefault("soak", 0)  # as is the soak's
    if not isinstance(hosts, list) or not all(isinstance(h, str) and NODE_NAME_RE.fullmatch(h) for h in hosts):
        raise ValueError(f"{path}: hosts must be a list of node names")
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"{path}: hosts names a node twice")
    for key, value in (("rounds", rounds), ("ran", ran), ("soak", soak)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**6:
            raise ValueError(f"{path}: {key} must be a count of rounds, found {value!r}")
    if isinstance(again, bool) or not isinstance(again, int) or again not in (0, 1):
        raise ValueError(f"{path}: again must be 0 or 1, the rounds run after the plan's, found {again!r}")
    if not isinstance(rs, list) or len(rs) != ran or not all(_seconds(v) for v in rs):
        raise ValueError(f"{path}: round_s must be the seconds of each round that ran")
    if ran > data["rounds"] + again + soak:  # rounds and soak, checked above as counts
        raise ValueError(f"{path}: {ran} rounds ran of {rounds} planned, {again} after them and {soak} of the soak")
    if not with_rounds:
        return data
    steps: dict[str, Any] = {}
    for k in range(ran):
        part = load_json(folder / ROUNDS_DIR / f"{k}.json")
        if not all(isinstance(v, dict) for v in part.values()):
            raise ValueError(f"{folder / ROUNDS_DIR / f'{k}.json'}: not an object of step records")
        steps.update(part)
    return {**data, "steps": steps}


def _seconds(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def load_json(path: Path) -> dict[str, Any]:
    """A JSON object read from a regular file of bounded size; ValueError otherwise."""
    try:
        data = json.loads(read_regular(path, RESULT_LIMIT))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Plan:
    """What a check was asked for, as check.json keeps it."""

    executor: str
    options: Options
    threshold: float  # the smallest shortfall against the population that names (docs/guides/nodes.md)
    nodes: int  # how many: the emulated nodes (local) or the allocation's
    nodelist: str | None = None  # Slurm's hostlist of the nodes, when the user named them
    cluster: dict[str, Any] | None = None  # the cluster profile, as the sweep's plan keeps it

    def write(self, run: Path) -> None:
        inside.write(run, PLAN, json_bytes({"format_version": PLAN_VERSION, **dataclasses.asdict(self)}))


# Each option's type and range; a plan read back is held to them (a run directory is untrusted).
_RANGES: dict[str, tuple[type, float, float]] = {
    "gpus_per_node": (int, 1, 64),
    "bytes": (int, 4, 2**34),
    "iters": (int, 1, 10_000),
    "gemm_size": (int, 0, 65536),
    "gemm_iters": (int, 1, 10_000),
    "partners": (int, 3, 100_000),
    "concurrency": (int, 1, 100_000),
    "step_timeout_s": (float, 1, 86400),
    "soak_s": (float, 0, 7 * 86400),
    "dcgm": (int, 0, max(dcgm.LEVELS)),
    "timeout_s": (float, 1, 86400),
}


def check_options(o: Options) -> None:
    """ValueError naming the option and its valid range when one is out of it."""
    for key, (kind, low, high) in _RANGES.items():
        value = getattr(o, key)
        if key in ("partners", "concurrency") and value is None:
            continue
        ok = isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
        if not ok or not (low <= value <= high) or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(
                f"{key} must be {'an integer' if kind is int else 'a number'} from {low:g} to {high:g}, found {value!r}"
            )
    if not isinstance(o.reference, tuple) or not all(
        isinstance(r, str) and NODE_NAME_RE.fullmatch(r) for r in o.reference
    ):
        raise ValueError(f"reference must be node names, found {o.reference!r}")
    if o.reference and o.partners is not None:
        raise ValueError("reference and partners are two ways of choosing pairs; give one")
    if not isinstance(o.gemm, bool):
        raise ValueError(f"gemm must be true or false, found {o.gemm!r}")
    if o.device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, found {o.device!r}")
    if o.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, found {o.backend!r}")


def load_plan(run: Path) -> Plan:
    """check.json of a run directory, every value checked; ValueError says which is wrong."""
    path = run / PLAN
    data = load_json(path)
    if data.get("format_version") != PLAN_VERSION:
        raise ValueError(f"{path}: format_version required {PLAN_VERSION}, found {data.get('format_version')!r}")
    try:
        raw = data["options"]
        if not isinstance(raw, dict) or set(raw) - {f.name for f in dataclasses.fields(Options)}:
            raise ValueError("options: not an object of the check's options")
        reference, rails = raw.get("reference", []), raw.get("rails", [])
        if not isinstance(rails, list) or not all(isinstance(r, dict) and set(r) <= {"hca", "ifname"} for r in rails):
            raise ValueError(f"rails must be a list of rails ({{hca, ifname}}), found {rails!r:.80}")
        options = Options(
            **{
                **raw,
                "reference": tuple(reference) if isinstance(reference, list) else reference,
                "rails": tuple(_rail(i, r) for i, r in enumerate(rails)),
            }
        )
        check_options(options)
        executor, threshold, nodes = data["executor"], data["threshold"], data["nodes"]
        # one of bench's executors: harness/check_nodes.py asks the registry, which this module is below
        if not isinstance(executor, str) or not re.fullmatch(r"[a-z]{1,32}", executor):
            raise ValueError(f"executor must be the name of one of bench's executors, found {executor!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold < 1:
            raise ValueError(f"threshold must be a fraction from 0 to below 1, found {threshold!r}")
        if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= 100_000:
            raise ValueError(f"nodes must be an integer from 1 to 100000, found {nodes!r}")
        nodelist, cluster = data.get("nodelist"), data.get("cluster")
        if nodelist is not None and not (isinstance(nodelist, str) and HOSTLIST_RE.fullmatch(nodelist)):
            raise ValueError(f"nodelist must be a Slurm hostlist, found {nodelist!r}")
        if cluster is not None and not isinstance(cluster, dict):
            raise ValueError("cluster must be an object")
    except KeyError as exc:
        raise ValueError(f"{path}: {exc.args[0]} is missing") from None
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return Plan(executor, options, float(threshold), nodes, nodelist, cluster)


def _rail(i: int, fields: dict[str, Any]) -> Rail:
    """Rail `i` of a plan, checked as the profile's are; ValueError naming its key otherwise."""
    try:
        return Rail(**fields)
    except FieldError as exc:
        raise ValueError(f"rails[{i}].{exc.key}: {exc}") from None
