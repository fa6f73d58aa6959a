"""The one error hierarchy of the harness.

Every failure bench can explain is a `BenchError`: its message is one line, and its
`exit_status` is what the process exits with. `bench`'s `main` catches `BenchError` once and
prints that line; anything else reaching `main` is a bug in bench, reported as one line too
(exit status 70, EX_SOFTWARE in sysexits.h) with the traceback only under BENCH_DEBUG=1.
"""

from __future__ import annotations

# A verdict's statuses (regress, nodes, accept; docs/reference/exit-status.md): 0 nothing found.
EXIT_FOUND = 1  # a key slower or failed, a node or link named, an acceptance failed
EXIT_UNJUDGED = 3  # nothing found, but part of it could not be judged (fail closed)
EXIT_USAGE = 2  # bad input: a flag, a file, a directory, a value
EXIT_INTERNAL = 70  # a bug in bench (sysexits.h EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


class BenchError(Exception):
    """A failure with a one-line explanation and the exit status it ends the command with."""

    exit_status = EXIT_USAGE

    def __init__(self, message: str, exit_status: int | None = None):
        super().__init__(message)
        if exit_status is not None:
            self.exit_status = exit_status


class UsageError(BenchError):
    """A flag or argument that cannot be used."""


class SpecError(BenchError):
    """A sweep file, cluster profile or override that cannot be used."""


class PlanError(BenchError):
    """A sweep whose matrix cannot run (e.g. a global batch that a world size does not divide)."""


class RunDirError(BenchError):
    """A directory that is not a usable run directory, or is in use."""


class DataError(BenchError):
    """Input that cannot be compared: not a run, an unusable summary, no key in common."""


class HistoryError(DataError):
    """An unusable history database: not ours, of another version, locked, damaged, or without
    the run asked for."""


class OutputError(BenchError):
    """An output path bench will not or cannot write."""


class SlurmError(BenchError):
    """A Slurm command that kept failing or refused the sweep: the run directory is consistent
    and can be resumed. Exit status 1, or 2 where the input is at fault."""

    exit_status = 1


def one_line(text: str) -> str:
    """`text` as one printable line: control characters (a newline, an escape sequence from a
    hostile file name) shown as escapes, so a message can never forge or hide lines."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown(text: object) -> str:
    """Text from a run directory, a log or a label as a rich console prints it: control
    characters shown as escapes (one_line), so a log cannot move the cursor or colour the
    terminal, and rich's markup escaped, so "[red]" in a job's reason is printed, not obeyed."""
    from rich.markup import escape

    return escape(one_line(str(text)))
