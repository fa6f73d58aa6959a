"""Where each rank is, for hang attribution (docs/guides/hangs.md).

Each rank rewrites a small progress file at every phase of its workload (a message size, a
training step), outside the timed regions, and registers `faulthandler` on STACK_SIGNAL: the
harness can then ask a rank that stopped making progress for its Python stack, which
faulthandler writes from its C signal handler, so a rank blocked inside a collective answers
too. A stopped rank (SIGSTOP, state T) cannot answer; its state says so. No torch.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import time
from typing import IO

STACK_SIGNAL = signal.SIGUSR2  # not SIGUSR1, which NCCL has caught in some releases (docs/reference/sources.md)
DIR = "progress"  # beside the workload's result file: jobs/<job>/progress/


def paths(json_path: str, rank: int) -> tuple[str, str]:
    """(progress file, stack file) of a rank, from its result path jobs/<job>/<workload>.json."""
    folder = os.path.join(os.path.dirname(json_path), DIR)
    key = os.path.splitext(os.path.basename(json_path))[0]
    return os.path.join(folder, f"{key}.rank{rank}.json"), os.path.join(folder, f"{key}.rank{rank}.stack")


class Progress:
    """A rank's progress reporter; does nothing without a result path (`bench run` by hand)."""

    def __init__(self, json_path: str | None, rank: int) -> None:
        self.file: str | None = None
        self._stack: IO[str] | None = None
        if not json_path:
            return
        self.file, stack = paths(json_path, rank)
        os.makedirs(os.path.dirname(self.file), exist_ok=True)
        self._stack = open(stack, "w")  # noqa: SIM115 - open for the process's life, for the signal handler
        faulthandler.register(STACK_SIGNAL, file=self._stack, all_threads=True, chain=False)
        self._head = {"rank": rank, "host": socket.gethostname(), "pid": os.getpid()}
        self._n = 0

    def __call__(self, phase: str) -> None:
        """Record that the rank entered `phase`: written to a temporary file and renamed, so a
        reader never sees half a record."""
        if self.file is None:
            return
        self._n += 1
        tmp = f"{self.file}.tmp"
        with open(tmp, "w") as f:
            json.dump({**self._head, "phase": phase, "n": self._n, "t": time.time()}, f)
        os.replace(tmp, self.file)

    def close(self) -> None:
        if self._stack is not None:
            faulthandler.unregister(STACK_SIGNAL)
            self._stack.close()
            self._stack = None
