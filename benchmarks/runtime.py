"""Inside a rank: choosing device and backend, joining the process group, recording the
environment, and the entry point that either joins a distributed launch or starts its own
ranks.

A workload module provides an argparse parser and a `measure(args, ctx)` function; `main`
here does the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from . import links
from .common import (
    DISTRIBUTION,
    LINKS,
    MEASUREMENT_RULES,
    PER_RANK,
    USAGE_RELAY,
    Launch,
    UsageError,
    captured_variables,
    detect_launch,
    json_safe,
    links_path,
    ranks_path,
    spawn_local_ranks,
)
from .progress import Progress
from .recorder import Recorder
from .results import SCHEMA_VERSION, atomic_write_json, is_stream

# --------------------------------------------------------------------------- device and backend


def resolve_device(requested: str, launch: Launch) -> torch.device:
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")
    index = gpu_index(launch.local_rank, launch.local_world_size, torch.cuda.device_count())
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def gpu_index(local_rank: int, local_world: int, visible: int) -> int:
    """Which of the GPUs this rank sees is its own. A node's ranks see either all of its GPUs
    (torchrun, or srun without binding: rank i takes GPU i) or their own share of them (srun's
    --gpus-per-task=1 or --gpu-bind=closest: each task sees one GPU, or the GPUs of its socket,
    and CUDA numbers them from 0 in each task; CUDA_VISIBLE_DEVICES, CUDA C Programming Guide).
    In both, rank i takes the visible GPU i mod their count. What fits neither, a count that
    does not divide the node's ranks, is refused rather than guessed: two ranks on one GPU is
    what NCCL rejects ("Duplicate GPU detected")."""
    hint = f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})"
    if visible < 1:
        raise UsageError(f"local rank {local_rank} sees no GPU {hint}")
    if visible < local_world and local_world % visible:
        raise UsageError(
            f"local rank {local_rank} of {local_world} on this node sees {visible} GPUs {hint}, which do not "
            f"divide among the node's ranks: give each task one GPU (srun --gpus-per-task=1) or all of the node's"
        )
    return local_rank % visible


def resolve_backend(requested: str, device: torch.device) -> str:
    if requested == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if requested == "nccl" and device.type != "cuda":
        raise UsageError("--backend nccl needs --device cuda; use --backend gloo on CPU")
    return requested


def init_process_group(launch: Launch, backend: str, device: torch.device, timeout_s: float) -> None:
    # Short timeout: a dead rank otherwise leaves the others blocked in a collective for
    # 10-30 min, the torch defaults (docs/reference/sources.md).
    kwargs: dict[str, Any] = {}
    if device.type == "cuda":
        kwargs["device_id"] = device
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=launch.rank,
        world_size=launch.world_size,
        timeout=_dt.timedelta(seconds=timeout_s),
        **kwargs,
    )


# --------------------------------------------------------------------------- environment


def _version(dist_name: str) -> str | None:
    try:
        return metadata.version(dist_name)
    except metadata.PackageNotFoundError:
        return None


def _gpu_driver() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.split()
    return lines[0] if lines else None


def capture_environment(launch: Launch, device: torch.device, backend: str) -> dict[str, Any]:
    """The environment of the whole job; a collective call, so every rank must call it."""
    mine = {
        "rank": launch.rank,
        "local_rank": launch.local_rank,
        "node_rank": launch.node_rank,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    ranks: list[Any] = [None] * launch.world_size
    dist.all_gather_object(ranks, mine)
    env: dict[str, Any] = {
        "launcher": launch.launcher,
        "world_size": launch.world_size,
        "backend": backend,
        "device_type": device.type,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "bench_version": _version(DISTRIBUTION),  # None where benchmarks/ is mounted, not installed
        "measurement_rules": MEASUREMENT_RULES,
        "cuda": torch.version.cuda,
        "nccl": None,
        "gpu_driver": None,
        "hosts": sorted({r["hostname"] for r in ranks}),
        "ranks": ranks,
        "variables": captured_variables(os.environ),
    }
    if device.type == "cuda":
        env["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
        if launch.rank == 0:
            env["gpu_driver"] = _gpu_driver()
    return env


def transport_evidence(launch: Launch, backend: str) -> dict[str, Any]:
    """Where the facts of the transport this job used are (docs/concepts/transport.md); a collective call.

    gloo: each rank's own connections, by interface, leaving out the rendezvous store's (on
    MASTER_PORT), which is not the collectives' transport. NCCL: its debug log, whose path
    pattern (NCCL_DEBUG_FILE, with %h and %p) is recorded as the ranks saw it."""
    if backend != "gloo":
        return {
            "source": "nccl_log",
            "debug": os.environ.get("NCCL_DEBUG"),
            "debug_file": os.environ.get("NCCL_DEBUG_FILE"),
        }
    store = {
        int(p) for p in (os.environ.get("MASTER_PORT"), os.environ.get("TORCHELASTIC_MASTER_PORT")) if p and p.isdigit()
    }
    mine = {"rank": launch.rank, "host": socket.gethostname(), **links.used_interfaces(store)}
    ranks: list[Any] = [None] * launch.world_size
    dist.all_gather_object(ranks, mine)
    return {"source": "sockets", "ranks": ranks}


def gather_rows(values: list[float], device: torch.device, world: int) -> list[list[float]]:
    """Every rank's `values` (lists of one length), rank by rank: a collective call."""
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    parts = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(parts, mine)
    return [p.tolist() for p in parts]


def gather_at_root(values: list[float], ctx: Context) -> list[list[float]]:
    """As gather_rows, but only rank 0 receives them (every other rank gets []): what only the
    result needs, which rank 0 writes, costs the other ranks nothing that grows with the world."""
    mine = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    parts = [torch.empty_like(mine) for _ in range(ctx.launch.world_size)] if ctx.is_root else None
    dist.gather(mine, gather_list=parts, dst=0)
    return [p.tolist() for p in parts] if parts else []


def worst_of_ranks(values: list[float], device: torch.device) -> list[float]:
    """Each of this rank's `values` at its largest over the ranks, which each give as many: a
    collective call."""
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return mine.tolist()


# --------------------------------------------------------------------------- entry point


@dataclass(frozen=True)
class Context:
    """What `measure` gets besides its arguments; `progress(phase)` records where the rank is
    (outside timed regions), for hang attribution."""

    launch: Launch
    device: torch.device
    backend: str
    progress: Progress = field(default_factory=lambda: Progress(None, 0))

    @property
    def is_root(self) -> bool:
        return self.launch.rank == 0

    def log(self, message: str) -> None:
        if self.is_root:
            print(message, flush=True)


def exit_rank(status: int) -> NoReturn:
    """End a workload's process with `status` once main has returned: its result written, its
    process group destroyed and its output flushed, the process leaves without the
    interpreter's finalization (os._exit). Finalization frees torch's objects in whatever order
    the collector takes them, and a rank that had finished and written its result has aborted
    there ("terminate called without an active exception", SIGABRT: the C++ runtime's message
    for a thread object destroyed while still joinable), which torchrun reports as the job's
    failure. An exception is not caught here: it ends the process
    as Python ends it, traceback and all."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def usage_error(line: str, status: int = 2) -> None:
    """Say why the ranks end with `status` (2, a usage error) in one line: to the launcher that
    started this rank (`bench run`, which says it in place of torchrun's report of a failed
    child, and ends with that status), else on stderr."""
    relay = os.environ.get(USAGE_RELAY)
    if relay:
        with contextlib.suppress(OSError), open(relay, "w") as f:
            f.write(f"{status} {line}\n")
            return
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Workload:
    """What a workload module gives `main`: its name in results, its parser, its `measure`, and
    `check(args, world_size)`, which validates the arguments before the workload runs (for the
    first of a launch, before any rank starts or joins)."""

    name: str
    build_parser: Callable[[], argparse.ArgumentParser]
    measure: Callable[[argparse.Namespace, Context], dict[str, Any]]
    check: Callable[[argparse.Namespace, int | None], None] | None = None
    # why a measured result fails its run (a collective's wrong elements), or None: the result
    # is written, and every rank ends with status 1
    failed: Callable[[dict[str, Any]], str | None] | None = None


def main(workload: Workload, argv: list[str] | None) -> int:
    """Run `workload`: join the launch it is in, or start `--nproc` ranks of itself."""
    return in_turn([(workload, list(sys.argv[1:] if argv is None else argv))])


def in_turn(steps: list[tuple[Workload, list[str]]]) -> int:
    """Run workloads one after another in this launch's ranks, joining the process group once
    (docs/concepts/architecture.md, "One launch per job"). Each is parsed, checked, measured and recorded
    as its turn comes, as a launch of its own would be, and the first that fails ends the turns
    with its status. One workload outside a launch starts `--nproc` ranks of itself; several
    need a launch (torchrun, srun)."""
    launch: Launch | None = None
    device, backend, first = torch.device("cpu"), "", argparse.Namespace()
    joined = False
    try:
        for turn, (w, argv) in enumerate(steps):
            args = w.build_parser().parse_args(argv)
            try:
                if turn == 0:
                    launch = detect_launch(os.environ)
                    if launch is None and len(steps) > 1:
                        raise UsageError("several workloads in turn run inside a launch (torchrun, srun)")
                    first = args
                if args.nproc < 1:
                    raise UsageError(f"--nproc must be at least 1, found {args.nproc}")
                if w.check:
                    w.check(args, launch.world_size if launch else args.nproc)
                if launch is None:
                    return spawn_local_ranks(f"benchmarks.{w.name}", argv, args.nproc)
                if turn == 0:
                    device = resolve_device(args.device, launch)
                    backend = resolve_backend(args.backend, device)
                for name in ("device", "backend", "timeout"):
                    mine, theirs = getattr(args, name), getattr(first, name)
                    if mine != theirs:
                        raise UsageError(f"--{name} {mine} differs from the launch's first workload's, {theirs}")
            except (UsageError, ValueError) as exc:
                # Every rank of a valid launch fails alike: rank 0 says why. A launch that could
                # not be read (RANK=5 with WORLD_SIZE=2) has no trustworthy rank, so every process says it.
                if launch is None or launch.rank == 0:
                    usage_error(f"bench run {w.name}: error: {exc}")
                if joined:
                    # Every rank fails this check alike, and none leaves before rank 0 has said
                    # why: torchrun ends the others once one exits, and rank 0, which wrote the
                    # last workload's result, comes to the check last.
                    dist.barrier()
                return 2
            beside = bool(args.json) and not is_stream(args.json)  # files beside the result: not beside a device
            progress = Progress(args.json if beside else None, launch.rank)
            recorder = Recorder(args.json if beside else None, launch.rank, backend)
            try:
                if not joined:
                    progress("joining the process group")
                    init_process_group(launch, backend, device, args.timeout)
                    joined = True
                ctx = Context(launch=launch, device=device, backend=backend, progress=progress)
                status = _measure_and_record(w, argv, args, ctx, beside)
            except Exception:
                recorder.dump()  # a collective that raised (its timeout, a peer gone): the record of it
                raise
            finally:
                progress.close()
                recorder.close()
            if status:
                return status
            gc.collect()  # the last workload's model and buffers, before the next is timed
        return 0
    finally:
        if joined:
            dist.destroy_process_group()


def _measure_and_record(w: Workload, argv: list[str], args: argparse.Namespace, ctx: Context, beside: bool) -> int:
    """One workload in a joined rank: measure it and write its result (rank 0)."""
    launch, device, backend, progress = ctx.launch, ctx.device, ctx.backend, ctx.progress
    environment = capture_environment(launch, device, backend)
    try:
        body = w.measure(args, ctx)
    except UsageError as exc:
        if ctx.is_root:
            usage_error(f"bench run {w.name}: error: {exc}")
        return 2
    links = body.pop(LINKS, None)
    # the files beside the result, by the key that names each in it: (path, what it holds)
    parts = {
        "per_rank_file": (ranks_path, body.pop(PER_RANK, None)),
        "links_file": (links_path, None if links is None else {LINKS: links}),
    }
    progress("recording the results")
    transport = transport_evidence(launch, backend)
    if ctx.is_root:
        result = {
            "schema_version": SCHEMA_VERSION,
            "workload": w.name,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "world_size": launch.world_size,
            "nodes": len({r["node_rank"] for r in environment["ranks"]}),
            "gpus_per_node": launch.local_world_size,
            "device": device.type,
            "backend": backend,
            "launcher": launch.launcher,
            "argv": argv,
            **body,
            "environment": environment,
            "transport": transport,
        }
        if args.json:
            hosts = [r["hostname"] for r in environment["ranks"]]
            for key, (where, part) in parts.items():
                if part is not None and beside:
                    # Written first: a result file on disk means the files it names are complete.
                    head = {"schema_version": SCHEMA_VERSION, "workload": w.name, "hosts": hosts}
                    atomic_write_json(where(args.json), json_safe({**head, **part}))
                    result[key] = os.path.basename(where(args.json))
            atomic_write_json(args.json, json_safe(result))
            print(f"# result written to {args.json}", flush=True)
    progress("done")
    failure = w.failed(body) if w.failed else None
    if failure:
        if ctx.is_root:
            usage_error(f"bench run {w.name}: {failure}", status=1)
        dist.barrier()  # every rank fails alike, and none leaves before rank 0 has said why
        return 1
    return 0
