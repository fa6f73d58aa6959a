"""What the workloads share and the harness reads too, without torch: sizes and their
parsing, the launch a process is in, redaction of the environment a result records, summary
statistics and the common flags. benchmarks/runtime.py holds what runs inside a rank.
Nothing in this package imports the harness.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .catalog import BACKENDS, DEVICES

# The distribution bench is installed as (pyproject.toml), whose version every result records.
DISTRIBUTION = "bench-scaling"
# How bench measures, as a number that changes whenever the same cluster would give a different
# figure (docs/concepts/provenance.md lists each change): results, plans, summaries and the history
# record it, and compare and regress refuse to judge across two of them unless told to. 1 is
# every run before the number was recorded.
MEASUREMENT_RULES = 2


class UsageError(Exception):
    """A mistake of the user's (flag, environment variable, data path): one line, exit status 2."""


# --------------------------------------------------------------------------- sizes

_SIZE_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(text: str | int, *, allow_zero: bool = False) -> int:
    """Parse a byte count the nccl-tests way: K, M and G are powers of 1024 (`64M` = 67,108,864).
    Zero only where it means "off" (`allow_zero`)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        s = str(text).strip().upper().removesuffix("B")
        suffix = s[-1:] if s[-1:] in ("K", "M", "G") else ""
        digits = s[: len(s) - len(suffix)]
        if not digits.isdigit():
            raise ValueError(
                f"{text!r} is not a size; use bytes with an optional K, M or G suffix, e.g. 8, 1K, 64M, 1G"
            )
        value = int(digits) * _SIZE_SUFFIX[suffix]
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"size {text!r} must be {'0 or more' if allow_zero else 'positive'}")
    return value


def message_sizes(min_bytes: int, max_bytes: int, factor: int, element_size: int = 1, chunks: int = 1) -> list[int]:
    """nccl-tests' ladder of message sizes: from min to max, each `factor` times the last,
    rounded down to whole elements split evenly into `chunks` (the collective's
    Collective.chunks in benchmarks/catalog.py); a size that rounds to one already there, or to
    nothing, is dropped. UsageError when none is left."""
    if max_bytes < min_bytes:
        raise UsageError(f"--max-bytes {max_bytes} is below --min-bytes {min_bytes}")
    if factor < 2:
        raise UsageError(f"--step-factor must be at least 2, found {factor}")
    unit = element_size * chunks
    sizes: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        rounded = size // unit * unit
        if rounded and (not sizes or sizes[-1] != rounded):
            sizes.append(rounded)
        size *= factor
    if not sizes:
        raise UsageError(
            f"no message size between {min_bytes} and {max_bytes} bytes holds a whole "
            f"element per rank ({unit} bytes); raise --max-bytes"
        )
    return sizes


def size_arg(text: str) -> int:
    """A byte count flag (argparse's `type`): the parser's error says what is wrong."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_or_zero_arg(text: str) -> int:
    """A byte count flag where 0 turns the feature off."""
    try:
        return parse_size(text, allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_arg(text: str) -> float:
    """A finite number above 0 (argparse's `type`): a timeout, a learning rate, a bucket size.
    0 would make every collective time out at once; nan or inf would train on nothing."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number above 0")
    return value


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, as every error of bench is: argparse's
    own prints the whole usage first. The usage is one `--help` away, and the line says so."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]  # typeshed overloads it by namespace type
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's, the namespace noting the deepest (sub)command's parser as `_parser`: a
        subcommand parses before its parent, so that an error found after, such as arguments
        left over, names the subcommand (`bench history list: error: ...`)."""
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, "_parser"):
            parsed._parser = self
        return parsed, extras


def format_size(n: int) -> str:
    for suffix, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


def runs(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted numbers as runs of consecutive ones: [1, 2, 3, 7] -> [(1, 3), (7, 7)]; a hostlist's
    ranges and the ranks a hang names are written from them."""
    out: list[tuple[int, int]] = []
    for v in numbers:
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


# --------------------------------------------------------------------------- launch

# Given to every torchrun agent bench starts: without it each agent leaves an empty
# torchelastic_* tree in the node's /tmp; /dev/null makes none (docs/reference/sources.md, "torchrun").
TORCHRUN_NO_LOG_DIR = "--log-dir=/dev/null"


@dataclass(frozen=True)
class Launch:
    """Where this process sits in the job, read from the launcher's environment."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    launcher: str


def _env_int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None:
        if default is None:
            raise UsageError(f"environment variable {name} is not set (needed for a distributed launch)")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"environment variable {name}={raw!r} is not an integer") from None
    if value < 0:
        raise UsageError(f"environment variable {name}={raw!r} must not be negative")
    return value


def detect_launch(env: Mapping[str, str]) -> Launch | None:
    """The launch this process is part of, or None when started by hand.

    torchrun sets RANK/WORLD_SIZE/LOCAL_RANK (and GROUP_RANK, the node's rank). A bare
    `srun` sets SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID inside a job step; the batch shell
    itself has SLURM_PROCID too but no SLURM_STEP_ID, so it does not count as a launch.
    """
    launcher_hint = env.get("BENCH_LAUNCHER")
    if "RANK" in env or "WORLD_SIZE" in env:
        world = _env_int(env, "WORLD_SIZE")
        rank = _env_int(env, "RANK")
        local_rank = _env_int(env, "LOCAL_RANK", 0)
        local_world = _env_int(env, "LOCAL_WORLD_SIZE", 1)
        node_rank = _env_int(env, "GROUP_RANK", _env_int(env, "NODE_RANK", 0))
        launcher = launcher_hint or ("torchrun" if "TORCHELASTIC_RUN_ID" in env else "env")
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not env.get(name):
                raise UsageError(f"environment variable {name} is not set (needed with RANK/WORLD_SIZE)")
    elif "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        world = _env_int(env, "SLURM_NTASKS")
        rank = _env_int(env, "SLURM_PROCID")
        local_rank = _env_int(env, "SLURM_LOCALID")
        node_rank = _env_int(env, "SLURM_NODEID", 0)
        nnodes = max(_env_int(env, "SLURM_NNODES", 1), 1)
        # SLURM_TASKS_PER_NODE reads like "2(x3)"; the even split is what the harness asks for.
        local_world = max(world // nnodes, 1)
        launcher = launcher_hint or "srun"
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not env.get(name):
                raise UsageError(f"environment variable {name} is not set (an srun launch needs it for env:// init)")
    else:
        return None
    if world < 1:
        raise UsageError(f"world size must be at least 1, found {world}")
    if rank >= world:
        raise UsageError(f"rank {rank} is not below the world size {world} (check RANK/SLURM_PROCID)")
    return Launch(
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        local_world_size=local_world,
        node_rank=node_rank,
        launcher=launcher,
    )


def spawn_local_ranks(module: str, argv: list[str], nproc: int) -> int:
    """Start `nproc` ranks of `module` on this machine with torchrun's standalone rendezvous."""
    # The ranks do not need --nproc, and torchrun's parser would take it for an ambiguous
    # abbreviation of its own --nproc-per-node even after the module name.
    rank_argv, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            rank_argv.append(arg)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        TORCHRUN_NO_LOG_DIR,
        "-m",
        module,
        *rank_argv,
    ]
    env = dict(os.environ)
    env.setdefault("BENCH_LAUNCHER", "torchrun-standalone")
    # torchrun sets 1 thread per rank only when several ranks share the node; be explicit so
    # that 1 and N ranks are measured with the same per-rank thread count.
    env.setdefault("OMP_NUM_THREADS", "1")
    # A usage error only the ranks can see (a collective with nothing to measure on this many
    # ranks, no CUDA device) is one line and exit 2, as every bad input is, and wrong results
    # one line and exit 1: rank 0 writes the status and line to the relay file, and torchrun's
    # 35-line report of the failed child is not passed on.
    fd, relay = tempfile.mkstemp(prefix="bench-usage-", suffix=".txt")
    os.close(fd)
    env[USAGE_RELAY] = relay
    try:
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        for line in proc.stderr:  # passed on as it comes, until a rank has said its usage error
            if os.path.getsize(relay) == 0:
                sys.stderr.buffer.write(line)
                sys.stderr.buffer.flush()
        status = proc.wait()
        with open(relay, encoding="utf-8", errors="replace") as f:
            said = f.readline().rstrip("\n")
        if said:  # "STATUS LINE" (runtime.usage_error)
            code, _, why = said.partition(" ")
            print(why, file=sys.stderr)
            return int(code) if code in ("1", "2") else 2
        return status
    finally:
        os.unlink(relay)


# --------------------------------------------------------------------------- environment

_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "SLURM_")
_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
REDACTED = "<redacted>"
# A name is taken for a secret's by its words (split at '_'), so that NCCL_IB_PKEY (an InfiniBand
# partition key, a plain setting) is kept while HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY,
# GIT_CREDENTIALS, X_AUTH_HEADER or SESSION_COOKIE are not.
_SECRET_WORDS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "COOKIE",
        "COOKIES",
        "PRIVATE",
    }
)
_SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "COOKIE", "APIKEY")
# A secret by content, whatever the name: user:password@ in a URL (RFC 3986 userinfo), an HTTP
# authorization value, and the fixed prefixes of common API tokens (GitHub, Hugging Face, Slack,
# AWS access key ids, OpenAI-style keys).
# Linear in the text: the scheme starts where a run of scheme characters starts (lookbehind), and
# the user part holds no ':', so each candidate splits at one ':' and scans once.
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s:]*:[^/@\s]*)@"
)
_TOKEN_LIKE = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|hf_[A-Za-z0-9]{20,}|xox[abpr]-[\w-]{10,}"
    r"|AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9_-]{20,})|\b(?:Bearer|Basic)\s+\S{8,}"
)


def secret_name(name: str) -> bool:
    """Whether a variable's name says it holds a secret."""
    words = [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w]
    return any(w in _SECRET_WORDS or w.startswith("AUTH") or w.endswith(_SECRET_SUFFIXES) for w in words)


def redacted(name: str, value: str) -> str:
    """The value as it may be recorded: REDACTED where the name says it is a secret, and any
    credential inside it (a URL's user:password, a token) replaced where the name does not."""
    if secret_name(name):
        return REDACTED
    value = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", value)
    return _TOKEN_LIKE.sub(REDACTED, value)


def looks_secret(name: str, value: str) -> bool:
    """Whether recording `name=value` would record a secret."""
    return redacted(name, value) != value


def captured_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The environment variables a result records: launcher, NCCL/Gloo/torch settings, Slurm job
    facts. Nothing else, and secrets redacted by name and by content."""
    return {
        name: redacted(name, env[name]) for name in sorted(env) if name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES
    }


# --------------------------------------------------------------------------- statistics


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def spread(values: list[float]) -> dict[str, float]:
    return {"p10": percentile(values, 10), "median": percentile(values, 50), "p90": percentile(values, 90)}


# --------------------------------------------------------------------------- entry point


USAGE_RELAY = "BENCH_USAGE_RELAY"  # the file where rank 0 says a usage error to `spawn_local_ranks`


def add_common_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("launch")
    g.add_argument(
        "--nproc", type=int, default=1, help="ranks to start on this machine when not inside torchrun/srun (default 1)"
    )
    g.add_argument("--device", choices=DEVICES, default="auto", help="auto: cuda where a GPU is seen, else cpu")
    g.add_argument(
        "--backend", choices=BACKENDS, default="auto", help="auto: nccl on cuda, gloo on cpu; nccl needs cuda"
    )
    g.add_argument("--json", metavar="PATH", help="rank 0 writes the result here (atomically)")
    g.add_argument(
        "--timeout",
        type=positive_arg,
        default=300.0,
        metavar="S",
        help="process-group timeout in seconds: how long a rank waits for a dead peer (default 300)",
    )


# Key of a measured body that holds per-rank timings. They go to a file of their own beside the
# result (`allreduce.json` -> `allreduce.ranks.json`): world size x iterations per size is most
# of the bytes, while every summary reads the result.
PER_RANK = "per_rank"
# Key of a measured body that holds the link probe's pair times (benchmarks/linkprobe.py). They
# go to a file of their own too (`allreduce.links.json`), which the straggler analysis reads
# alone: the per-rank file grows with ranks x rows x iterations, past what a result may be
# (results.RESULT_LIMIT) on a job of hundreds of nodes.
LINKS = "links"


def _beside(result_path: str | os.PathLike, suffix: str) -> str:
    base = os.fspath(result_path)
    return (base[:-5] if base.endswith(".json") else base) + suffix


def ranks_path(result_path: str | os.PathLike) -> str:
    return _beside(result_path, ".ranks.json")


def links_path(result_path: str | os.PathLike) -> str:
    return _beside(result_path, ".links.json")


def json_safe(obj: Any) -> Any:
    """NaN and infinities become null: they are not JSON. Other floats keep 7 significant
    digits, beyond what the clocks resolve, which keeps files short and quick to parse."""
    if isinstance(obj, float):
        return float(f"{obj:.7g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
