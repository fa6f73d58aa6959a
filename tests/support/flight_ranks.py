"""Ranks whose flight recorder holds a fault the test injects, for tests/modules/harness/evidence/
test_flight.py: run by torchrun, 4 gloo ranks, each with bench's own dumper (benchmarks/recorder.py)
for workload "w" of job directory JOB_DIR. Three all-reduces of 65,536 floats, then the fault:

- `stop`: rank 2 stops itself (SIGSTOP) before the fourth; the others wait in it.
- `size`: rank 2 broadcasts 8,192 floats from rank 0, which sends 4,096; gloo completes it (a
  receiver that gets less than its buffer holds takes it), so the mismatch hides until read.

Each rank leaves JOB_DIR/at-fault.rank<R> as it comes to the fault; then every rank that can
waits for the harness's request, dumps, and sleeps until it is ended.
Not a product flag: the fault exists only here.
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from benchmarks.recorder import Recorder


def main(job_dir: str, fault: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    recorder = Recorder(os.path.join(job_dir, "w.json"), rank, "gloo")
    t = torch.ones(1 << 16)
    for _ in range(3):
        dist.all_reduce(t)
    with open(os.path.join(job_dir, f"at-fault.rank{rank}"), "w"):
        pass
    if fault == "stop":
        if rank == 2:
            os.kill(os.getpid(), signal.SIGSTOP)
        dist.all_reduce(t)
    else:
        dist.broadcast(torch.ones(1 << 13 if rank == 2 else 1 << 12), 0)
    time.sleep(600)
    recorder.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
