"""bench's command-line reference, docs/reference/cli.md, written from bench's own parsers:
every command and subcommand, its usage and each argument's help, and each workload's flags of
`bench run`. A test holds the file equal to what this writes, so that a flag added, renamed or
removed fails until the page is written again:

    python -m harness.commands.manual > docs/reference/cli.md
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

WIDTH = 100  # the usage lines' width, whatever the terminal that writes the page
HEADER = """# The command line

Every command of `bench`, its usage and its arguments, as `bench COMMAND --help` gives them.
This page is written from bench's own parsers (`python -m harness.commands.manual > docs/reference/cli.md`),
and a test holds it equal to them. Exit statuses: docs/reference/exit-status.md.
"""


def render() -> str:
    """The page: each command in the order `bench --help` lists them, a command's subcommands
    after it, then each workload of `bench run`."""
    from benchmarks.catalog import PROBES, WORKLOADS
    from harness.commands import build_parser
    from harness.commands.running import RUN_HELP

    with _width(WIDTH):
        parts = [HEADER]
        for name, parser, text in _commands(build_parser(), "bench"):
            if name == "bench run":  # its flags are each workload's, below
                parts.append(f"## bench run\n\n```\n{RUN_HELP}\n```\n")
                continue
            parts.append(_section(name, parser, text))
        for workload in (*WORKLOADS, *PROBES):
            module = importlib.import_module(f"benchmarks.{workload}")
            parts.append(_section(f"bench run {workload}", module.build_parser(), None))
    return "\n".join(parts)


def _commands(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser, str | None]]:
    """(name, parser, its one-line help) of each subcommand under `parser`, depth first."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for sub, subparser in action.choices.items():
            yield f"{name} {sub}", subparser, helps.get(sub)
            yield from _commands(subparser, f"{name} {sub}")


def _section(name: str, parser: argparse.ArgumentParser, text: str | None) -> str:
    lines = [f"## {name}", ""]
    about = text or parser.description
    if about:
        lines += [_expand(about, {}), ""]
    lines += ["```", parser.format_usage().strip(), "```", ""]
    rows = [a for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
    rows = [a for a in rows if not isinstance(a, argparse._SubParsersAction)]
    if rows:
        lines += ["| argument | what it does |", "|---|---|"]
        for action in rows:
            lines.append(f"| `{_cell(_spelling(action))}` | {_cell(_expand(action.help or '', vars(action)))} |")
        lines.append("")
    return "\n".join(lines)


def _spelling(action: argparse.Action) -> str:
    """How the argument is written: `--max-nodes N`, `-b, --min-bytes MIN_BYTES`, `DIR`."""
    if action.metavar is not None:
        metavar = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        metavar = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        metavar = action.dest.upper() if action.option_strings else action.dest  # as argparse shows them
    if not action.option_strings:
        return metavar + (" ..." if action.nargs in ("*", "+", argparse.REMAINDER) else "")
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    shown = {"?": f"[{metavar}]", "*": f"[{metavar} ...]", "+": f"{metavar} [{metavar} ...]"}.get(
        str(action.nargs), metavar
    )
    return ", ".join(action.option_strings) + " " + shown


def _expand(text: str, values: dict[str, object]) -> str:
    """A help text as argparse prints it: %(default)s and the like filled in, %% a percent."""
    shown = {k: v.__name__ if callable(v) and hasattr(v, "__name__") else v for k, v in values.items()}
    try:
        return " ".join((text % shown).split())
    except (KeyError, TypeError, ValueError):
        return " ".join(text.split())


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table."""
    return text.replace("|", "\\|")


@contextlib.contextmanager
def _width(columns: int) -> Iterator[None]:
    """argparse's formatter reads the terminal's width from COLUMNS: fixed while the page is
    written, so that it wraps alike on every machine."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


if __name__ == "__main__":
    sys.stdout.write(render())
