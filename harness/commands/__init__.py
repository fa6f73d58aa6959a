"""The `bench` subcommands, a module per group, each command beside its parser, and bench's
parser assembled from the groups (harness/cli.py runs it; harness/commands/manual.py writes
docs/reference/cli.md from it). `shared` holds what the groups share."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from benchmarks.common import OneLineParser
from harness.run import provenance

# The command groups, in the order `bench --help` lists them, with the commands each adds
# (tests/modules/harness/test_cli.py holds each to what it adds). A command loads its own group
# alone: regress is spared the others' imports, a quarter of its start.
GROUPS = {
    "harness.commands.running": ("sweep", "run", "collect", "plot", "status"),
    "harness.commands.judging": ("compare", "regress", "report", "export", "transport"),
    "harness.commands.fleet": ("dashboard", "history"),
    "harness.commands.checks": ("nodes", "accept"),
    "harness.commands.planning": ("predict",),
}


class _Version(argparse.Action):
    """`bench --version`: which bench this is (docs/concepts/provenance.md), read only when asked, since
    the commit takes a git call."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print bench's version, commit and measurement rules")

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        import platform
        from importlib import metadata

        try:
            torch = metadata.version("torch")
        except metadata.PackageNotFoundError:
            torch = "not installed"
        print(f"bench {provenance.describe(provenance.record())}; Python {platform.python_version()}, torch {torch}")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """bench's parser: with the subcommands of the group that adds `command` where one does, of
    every group otherwise (`bench --help`, a command mistyped)."""
    p = OneLineParser(prog="bench", description="Scaling benchmarks for distributed PyTorch training.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [g for g, commands in GROUPS.items() if command in commands] or GROUPS:
        importlib.import_module(name).add_parsers(sub)
    return p
