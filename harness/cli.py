"""The `bench` command.

    bench sweep [SWEEP.yaml] [--max-nodes N] [--repeat N] [--executor auto|local|slurm|submitit] [--out DIR] [--dry-run]
    bench sweep --resume DIR [--yes]
    bench run allreduce|synthetic|real|transformer|gemm [workload flags]
    bench nodes [--cluster PROFILE] [--nodelist HOSTLIST | --nodes N] [--partners K] [--json]
    bench collect DIR | bench plot DIR | bench status DIR
    bench compare DIR_A [DIR_B] [--across AXIS=A,B]
    bench history add|list|plot|changes|check|remove|accept|migrate|copy|grant
    bench dashboard --db DB --out DIR
    bench regress DIR --cluster NAME [--baseline median:K|last|best|label:L] | DIR --baseline reference
    bench report DIR [--compare DIR_B | --across AXIS=A,B]
    bench transport LOG... [--json]
    bench export DIR --format openmetrics|influx [--out FILE]

User mistakes end with one line on stderr and exit status 2; a sweep with failed jobs exits 1;
regress exits 1 on a regression or failed key and 3 on a key it cannot judge; nodes exits 1
when it names a node or link and 3 when part of the check could not be judged.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from benchmarks.catalog import PROBES, WORKLOADS
from harness.commands import build_parser
from harness.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, BenchError, one_line

# The commands whose work is Arrow tables: pyarrow comes up with the C library's malloc as its
# default pool, not mimalloc, with which regress of large runs took longer and more memory
# (docs/reference/sources.md, "Arrow's allocator").
TABLE_COMMANDS = frozenset({"collect", "plot", "compare", "regress", "report", "export", "history", "dashboard"})
POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a path with undecodable bytes is printed, not fatal
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    # `bench run WORKLOAD ...` hands everything after the workload to it, --help included; the
    # run subcommand has no --help of its own, so `bench run --help` is answered here.
    if argv[:1] == ["run"] and argv[1:] in (["-h"], ["--help"]):
        print(importlib.import_module("harness.commands.running").RUN_HELP)
        return 0
    if len(argv) >= 2 and argv[0] == "run" and argv[1] in (*WORKLOADS, *PROBES):
        run = importlib.import_module("harness.commands.running").cmd_run
        return int(run(argparse.Namespace(workload=argv[1], workload_args=argv[2:])))
    try:
        args, extra = build_parser(argv[0] if argv else None).parse_known_args(argv)
        if extra:
            args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse's one line said (or --help printed)
        return exc.code if isinstance(exc.code, int) else 2
    if args.command in TABLE_COMMANDS:
        _system_allocator()
    try:
        return args.func(args)
    except BenchError as exc:
        print(f"bench {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print(f"bench {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `bench compare A B | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except Exception as exc:
        # A bug in bench: still one line, and the traceback for whoever asks for it.
        if os.environ.get("BENCH_DEBUG"):
            raise
        print(
            f"bench {args.command}: internal error (a bug in bench; BENCH_DEBUG=1 shows where): "
            f"{type(exc).__name__}: {one_line(str(exc))}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _system_allocator() -> None:
    """Import pyarrow with the C library's malloc as its default pool (TABLE_COMMANDS says why),
    unless it is imported already or the user chose a pool. The variable is gone again before
    the command runs: no process bench starts inherits it."""
    if "pyarrow" in sys.modules or POOL_VARIABLE in os.environ:
        return
    os.environ[POOL_VARIABLE] = "system"
    try:
        import pyarrow  # noqa: F401  (read at import: the pool is chosen)
    finally:
        del os.environ[POOL_VARIABLE]


def entry() -> int:
    """The `bench` console script: `main`, then the process ends at once with main's status.

    After main a Ctrl-C ends the process quietly, the work and its one line being done (Python
    would print a KeyboardInterrupt traceback). And the interpreter's teardown is skipped: a
    pyarrow worker thread still alive then makes libstdc++ abort the process, which turns exit
    status 0 or 2 into SIGABRT now and then (apache/arrow#34314). Every file bench writes is
    complete and closed before main returns; only the standard streams need flushing.
    BENCH_DEBUG=1 keeps the normal exit, for profilers and debuggers that report at exit.
    """
    try:
        status = main()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    if os.environ.get("BENCH_DEBUG"):
        return status
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass
    os._exit(status)


if __name__ == "__main__":
    sys.exit(entry())
