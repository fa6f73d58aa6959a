"""`bench nodes` and `bench accept`: the node and link check, and the acceptance made of it and a
sweep; each command beside its parser."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from benchmarks.common import parse_size
from harness import accept, check_nodes, executors
from harness.analysis.compare import parse_threshold
from harness.commands.shared import (
    DB_HELP,
    EXECUTOR_HELP,
    chosen_executor,
    console_to,
    history_db,
    new_console,
    positive_int,
    results_root,
)
from harness.config.cluster_profile import ClusterProfile, Rail, load_profile
from harness.config.fields import SHIPPED, FieldError, check_time
from harness.errors import UsageError
from harness.evidence.dcgm import LEVELS
from harness.nodes.driver import check_options
from harness.nodes.rounds import Options

LOCAL_PROFILE = SHIPPED / "clusters" / "local.yaml"  # `bench accept --executor local`'s references


def _check_options(options: Options) -> None:
    """The node check's options, checked; a bad one is a UsageError naming its flag."""
    try:
        check_options(options)
    except ValueError as exc:
        key = str(exc).split(" ", 1)[0]
        flag = {"step_timeout_s": "--step-timeout"}.get(key, f"--{key.replace('_', '-')}")
        raise UsageError(f"{flag}: {exc}") from None


def _rails(args: argparse.Namespace, batch: bool, profile: ClusterProfile | None) -> tuple[Rail, ...]:
    """The rails `--rails` asks each pair to be checked on: the cluster profile's."""
    if not args.rails:
        return ()
    if not batch:
        raise UsageError(
            "--rails checks a cluster's rails, named in its profile (rails:); the local executor's emulated "
            "nodes share this machine's one loopback"
        )
    if profile is None or not profile.rails:
        name = profile.name if profile else "(none)"
        raise UsageError(f'--rails: cluster profile {name} lists no rails: (docs/guides/nodes.md, "Rails")')
    return profile.rails


SOAK_HELP = (
    "once the rounds have run, measure their pairs again, pass after pass, for this long, and name a link or "
    "node whose figures fall while warm (whole passes: at least 2 are needed)"
)
SOAK_MAX_MIN = 7 * 24 * 60
DCGM_HELP = (
    "first run DCGM's diagnostic of every node's GPUs at this level, 1 to 4 (dcgmi diag -r LEVEL), and name a "
    "node whose GPU fails a test; a node without dcgmi is not judged"
)


def soak_minutes(text: str) -> float:
    """--soak's minutes: a number above 0, at most a week."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes") from None
    if not 0 < value <= SOAK_MAX_MIN:
        raise argparse.ArgumentTypeError(f"must be minutes above 0, at most {SOAK_MAX_MIN} (a week), found {text}")
    return value


def cmd_nodes(args: argparse.Namespace) -> int:
    # With --json the verdict alone goes to stdout, and the rest to stderr.
    console = console_to(sys.stderr if args.json else sys.stdout)
    if args.report:
        given = [
            f for f, v in (("--nodelist", args.nodelist), ("--nodes", args.nodes), ("--cluster", args.cluster)) if v
        ]
        if given or args.out or args.dry_run:
            extra = ", ".join(given) or "--out or --dry-run"
            raise UsageError(
                f"--report DIR judges the check in DIR again; it takes --threshold and --json, not {extra}"
            )
        try:
            threshold = parse_threshold(args.threshold) if args.threshold else None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return check_nodes.judge_again(Path(args.report), threshold, console, args.json)
    # The check's nodes come from the profile's partition, so a dry run needs it too.
    kind, profile = chosen_executor(args, console, profile_on_dry_run=True)
    try:
        size = parse_size(args.bytes)
        threshold = parse_threshold(args.threshold or kind.node_threshold)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = Options(
        gpus_per_node=args.gpus_per_node,
        device=args.device,
        backend=args.backend,
        bytes=size,
        iters=args.iters,
        gemm_size=args.gemm_size,
        partners=args.partners,
        reference=tuple(check_nodes.expand(args.reference)) if args.reference else (),
        gemm=args.device != "cpu" if args.gemm is None else args.gemm,
        concurrency=args.concurrency or ((profile.max_running_jobs if profile else None) if kind.batch else 1),
        step_timeout_s=args.step_timeout,
        rails=_rails(args, kind.batch, profile),
        soak_s=(args.soak or 0.0) * 60,
        dcgm=args.dcgm or 0,
    )
    _check_options(options)
    if args.time_limit is not None:
        try:
            check_time("time_limit_min", args.time_limit, "--time-limit")
        except FieldError as exc:
            raise UsageError(f"--time-limit {exc}") from None
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else results_root() / f"nodes-{stamp}"
    return check_nodes.start(
        executor=kind,
        profile=profile,
        options=options,
        threshold=threshold,
        count=args.nodes,
        nodelist=args.nodelist,
        time_limit_min=args.time_limit,
        out=out,
        console=console,
        yes=args.yes,
        dry_run=args.dry_run,
        as_json=args.json,
        db=history_db(args),
    )


def cmd_accept(args: argparse.Namespace) -> int:
    console = new_console()
    kind, profile = chosen_executor(args, console, profile_on_dry_run=True)
    if kind.batch:
        profile_path = args.cluster or os.environ.get("BENCH_CLUSTER", "")
        sweep_path = SHIPPED / "accept.yaml"
    else:  # the emulated cluster of this machine, with its own references (docs/guides/accept.md)
        profile_path = str(LOCAL_PROFILE)
        profile = load_profile(profile_path)
        sweep_path = SHIPPED / "local-accept.yaml"
    assert profile is not None  # a batch executor has one (chosen_executor)
    try:
        size = parse_size(args.bytes)
        threshold = parse_threshold(args.threshold or kind.node_threshold)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    gpus = args.gpus_per_node or max((r.gpus_per_node or 1 for r in profile.reference), default=1)
    options = Options(
        gpus_per_node=gpus,
        bytes=size,
        iters=args.iters,
        rails=_rails(args, kind.batch, profile),
        soak_s=(args.soak or 0.0) * 60,
        dcgm=args.dcgm or 0,
    )
    _check_options(options)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return accept.start(
        executor=kind,
        profile=profile,
        profile_path=profile_path,
        sweep_path=Path(args.sweep) if args.sweep else sweep_path,
        options=options,
        threshold=threshold,
        nodelist=args.nodelist,
        count=args.nodes,
        out=Path(args.out) if args.out else results_root() / f"accept-{stamp}",
        console=console,
        yes=args.yes,
        db=history_db(args),
        dry_run=args.dry_run,
    )


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The group's subcommands, on `sub`."""
    n = sub.add_parser(
        "nodes", help="check every node and every pair of nodes, and name the ones to drain (docs/guides/nodes.md)"
    )
    n.add_argument("--executor", choices=(executors.AUTO, *executors.NAMES), default=executors.AUTO, help=EXECUTOR_HELP)
    n.add_argument("--cluster", metavar="PROFILE", help="cluster profile YAML (default $BENCH_CLUSTER)")
    n.add_argument("--db", help=DB_HELP + "; the estimate takes the last check of the profile's cluster")
    n.add_argument(
        "--nodelist",
        metavar="HOSTLIST",
        help="the nodes to check, in Slurm's hostlist syntax (default: the profile's partition's usable nodes)",
    )
    n.add_argument("--nodes", type=positive_int, metavar="N", help="emulated nodes of the local executor (default 4)")
    n.add_argument("--gpus-per-node", type=positive_int, default=1, metavar="G", help="ranks per node (default 1)")
    n.add_argument(
        "--device", choices=("auto", "cuda", "cpu"), default="auto", help="auto: cuda where a GPU is seen, else cpu"
    )
    n.add_argument(
        "--backend", choices=("auto", "nccl", "gloo"), default="auto", help="auto: nccl on cuda, gloo on cpu"
    )
    n.add_argument(
        "--bytes", default="64M", metavar="SIZE", help="message of the all-reduce and the exchange (default 64M)"
    )
    n.add_argument("--iters", type=positive_int, default=20, help="timed calls of each collective (default 20)")
    n.add_argument(
        "--gemm-size", type=int, default=0, metavar="N", help="matmul side (default 8192 on GPUs, 1024 on CPUs)"
    )
    n.add_argument(
        "--partners",
        type=positive_int,
        metavar="K",
        help="test each node against K others (the first K rounds; K at least 3, so that a slow link is not "
        "taken for a slow node) rather than every pair: K rounds, not N-1",
    )
    n.add_argument(
        "--reference",
        metavar="HOSTLIST",
        help="known-good nodes: they meet each other, then every other node meets one of them; "
        "R-1 + (N-R)/R rounds for R of them",
    )
    n.add_argument(
        "--rails",
        action="store_true",
        help="each pair again on each rail of the profile (rails:) alone, one rank a node: a slow HCA or "
        "cable is named with its rail",
    )
    n.add_argument("--soak", type=soak_minutes, metavar="MINUTES", help=SOAK_HELP)
    n.add_argument("--dcgm", type=int, choices=LEVELS, metavar="LEVEL", help=DCGM_HELP)
    n.add_argument(
        "--concurrency",
        type=positive_int,
        metavar="K",
        help="steps of a round at once (default: all on Slurm, or the profile's max_running_jobs; 1 locally, "
        "where emulated nodes share the CPUs)",
    )
    n.add_argument(
        "--gemm",
        action=argparse.BooleanOptionalAction,
        help="each node's matmul throughput (default on, off with --device cpu)",
    )
    n.add_argument(
        "--threshold",
        help="the least shortfall against the other nodes' median (for a link, its nodes') that names it "
        "(default 10%%; 50%% locally, where the emulated nodes are one machine)",
    )
    n.add_argument(
        "--step-timeout",
        type=float,
        default=Options.step_timeout_s,
        metavar="S",
        help=f"a step running longer fails (default {Options.step_timeout_s:g})",
    )
    n.add_argument(
        "--time-limit", type=float, metavar="MIN", help="the Slurm job's limit (default: rounds x step timeout + 5)"
    )
    n.add_argument("--out", help="run directory (default nodes-<timestamp> in $BENCH_RESULTS, else in results/)")
    n.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout (the rest on stderr)")
    n.add_argument("--yes", action="store_true", help="submit without asking, whatever the node-hours")
    n.add_argument("--dry-run", action="store_true", help="write the job's scripts, submit nothing")
    n.add_argument(
        "--report",
        metavar="DIR",
        help="judge the check in DIR again (with --threshold, if given) and rewrite its verdict's files",
    )
    n.set_defaults(func=cmd_nodes)

    a = sub.add_parser(
        "accept",
        help="after maintenance: the node check, the sweep the profile's references name, one verdict and a "
        "report to sign (docs/guides/accept.md)",
    )
    a.add_argument("--executor", choices=(executors.AUTO, *executors.NAMES), default=executors.AUTO, help=EXECUTOR_HELP)
    a.add_argument(
        "--cluster",
        metavar="PROFILE",
        help="cluster profile YAML, with reference: figures (default $BENCH_CLUSTER; locally, bench's "
        f"{LOCAL_PROFILE.relative_to(SHIPPED.parent)})",
    )
    a.add_argument("--nodelist", metavar="HOSTLIST", help="the nodes to check (default: the profile's partition's)")
    a.add_argument(
        "--nodes",
        type=positive_int,
        metavar="N",
        help=f"emulated nodes of the local executor (default {check_nodes.LOCAL_NODES})",
    )
    a.add_argument(
        "--sweep",
        help="the acceptance sweep, narrowed to the references' keys (default: bench's accept.yaml; locally, "
        "local-accept.yaml)",
    )
    a.add_argument(
        "--gpus-per-node",
        type=positive_int,
        metavar="G",
        help="the node check's ranks per node (default: the most the references name, else 1)",
    )
    a.add_argument("--bytes", default="64M", metavar="SIZE", help="the node check's message (default 64M)")
    a.add_argument("--iters", type=positive_int, default=20, help="the node check's timed calls (default 20)")
    a.add_argument(
        "--rails",
        action="store_true",
        help="the node check: each pair again on each rail of the profile (rails:) alone, one rank a node: a "
        "slow HCA or cable is named with its rail",
    )
    a.add_argument(
        "--soak",
        type=soak_minutes,
        metavar="MINUTES",
        help="the node check: "
        + SOAK_HELP
        + "; then, after the sweep, its first collective at its largest size on its most nodes, this long again, "
        "judged by how its bus bandwidth falls while warm",
    )
    a.add_argument("--dcgm", type=int, choices=LEVELS, metavar="LEVEL", help="the node check: " + DCGM_HELP)
    a.add_argument("--threshold", help="the node check's threshold (default 10%%; 50%% locally, as bench nodes)")
    a.add_argument("--db", help=DB_HELP + "; the node check's estimate takes the cluster's last check")
    a.add_argument(
        "--out", help="directory of the acceptance (default accept-<timestamp> in $BENCH_RESULTS, else results/)"
    )
    a.add_argument("--yes", action="store_true", help="submit without asking, whatever the node-hours")
    a.add_argument(
        "--dry-run",
        action="store_true",
        help="write the node check's and the sweep's job scripts and show their cost; submit nothing",
    )
    a.set_defaults(func=cmd_accept)
