"""A stand-in for Slurm's client commands (sbatch, squeue, sacct, scancel), for the executor's
tests that must not need root or the testbed: polling, back-off, chains, adopt-on-resume and
failing tools.

Each command is a two-line wrapper that runs this file with the command's name first (the
`fake_slurm` fixture in tests/conftest.py writes them onto PATH). It replays what
Slurm 22.05.8 printed on the testbed (tests/testbed; the same replies are quoted in
tests/modules/harness/executors/slurm/test_replies.py) for the options the executor uses, and no other:

    sbatch --parsable [--dependency=afterany:ID] jobs/NAME/job.sbatch   ->  "ID\\n"
    squeue -h -o %i|%T|%r -j IDS                  ->  "ID|PENDING|Priority", "ID|RUNNING|None";
                                                      rc 1 and "slurm_load_jobs error: Invalid
                                                      job id specified" when it knows none of IDS
    squeue -h -t all -n NAMES -o %i|%j|%Z         ->  "ID|bench-NAME|WORKDIR"
    sacct -X -D -P -n --format=JobID,State,ExitCode,ElapsedRaw,NNodes,NodeList,Start,End -j IDS
                                                  ->  "ID|COMPLETED|0:0|5|2|bnode[1-2]|START|END"
    sacct -X -P -n --name=NAMES -S TIME --format=JobID,JobName,WorkDir
    sacct -P -n --format=JobID,TotalCPU,ElapsedRaw,AllocCPUS,AllocTRES,TRESUsageInTot -j IDS
                                                  ->  "ID|00:06.873|4|4|billing=4,cpu=4,node=2|" and
                                                      a row per step (jobacct_gather/linux)
    scancel IDS

State lives in $FAKE_SLURM_DIR: `scenario.json`, written by the test, says what happens to
each job, by the job name bench gives it (bench-NAME):

    {"jobs": {"NAME": {"queue": [["PENDING", "Priority"], ["RUNNING", "None"]],
                       "acct_lag": 1, "state": "COMPLETED", "exit": "0:0", "elapsed": 5}},
     "fail": {"sbatch": [[1, "sbatch: error: ..."]], "squeue": [[1, "..."]]}}

`queue` is what successive squeue calls show of a job after its submission (the last entry
repeats while `leave_after` calls have not passed; then the job has left the queue); sacct
shows it RUNNING for `acct_lag` calls after it left, then its final state. `fail` lists replies
(exit status, stderr) that the next calls of a command give instead of working. Every call
is logged to `calls.log` as "monotonic-time command args...", for the test to read.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

STATE = Path(os.environ["FAKE_SLURM_DIR"])
START, END = "2026-11-22T06:43:20", "2026-11-22T06:43:25"  # as sacct prints them


def _load() -> tuple[dict, dict]:
    scenario = json.loads((STATE / "scenario.json").read_text())
    state_file = STATE / "state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"next_id": 100, "jobs": {}, "fail": {}}
    return scenario, state


def _fail(tool: str, scenario: dict, state: dict) -> tuple[int, str] | None:
    used = state["fail"].get(tool, 0)
    replies = scenario.get("fail", {}).get(tool, [])
    if used < len(replies):
        state["fail"][tool] = used + 1
        return replies[used][0], replies[used][1]
    return None


def _queue_row(job: dict, plan: dict) -> tuple[str, str] | None:
    """What squeue shows of the job at this call, or None once it has left the queue."""
    if job.get("cancelled"):
        return None
    seen = job["squeue_calls"]
    queue = plan.get("queue", [["RUNNING", "None"]])
    if seen >= len(queue) + plan.get("leave_after", 0):
        return None
    return tuple(queue[min(seen, len(queue) - 1)])  # type: ignore[return-value]


def sbatch(args: list[str], scenario: dict, state: dict) -> int:
    script = args[-1]
    name = "bench-" + Path(script).parent.name
    job_id = str(state["next_id"])
    state["next_id"] += 1
    after = next((a.split(":", 1)[1] for a in args if a.startswith("--dependency=afterany:")), None)
    state["jobs"][job_id] = {
        "name": name,
        "workdir": os.getcwd(),
        "after": after,
        "squeue_calls": 0,
        "sacct_after_leaving": 0,
        "left": False,
    }
    print(job_id)
    return 0


def squeue(args: list[str], scenario: dict, state: dict) -> int:
    fmt = args[args.index("-o") + 1]
    if "-n" in args:  # adopt: every state, by job name
        names = set(args[args.index("-n") + 1].split(","))
        for job_id, job in state["jobs"].items():
            if job["name"] in names:
                print(f"{job_id}|{job['name']}|{job['workdir']}")
        return 0
    ids = args[args.index("-j") + 1].split(",")
    known = [i for i in ids if i in state["jobs"]]
    if not known:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    assert fmt == "%i|%T|%r", fmt
    for job_id in known:
        job = state["jobs"][job_id]
        if job["left"]:
            continue
        row = _queue_row(job, scenario["jobs"].get(job["name"].removeprefix("bench-"), {}))
        job["squeue_calls"] += 1
        if row is None:
            job["left"] = True
            continue
        print(f"{job_id}|{row[0]}|{row[1]}")
    return 0


def sacct(args: list[str], scenario: dict, state: dict) -> int:
    if any(a.startswith("--name=") for a in args):  # adopt
        names = set(next(a for a in args if a.startswith("--name="))[7:].split(","))
        for job_id, job in state["jobs"].items():
            if job["name"] in names:
                print(f"{job_id}|{job['name']}|{job['workdir']}")
        return 0
    ids = args[args.index("-j") + 1].split(",")
    usage = any(a.startswith("--format=JobID,TotalCPU") for a in args)
    for job_id in ids:
        job = state["jobs"].get(job_id)
        if job is None:
            continue
        if usage:  # what the testbed printed for a 2-node job of two steps
            print(f"{job_id}|00:06.873|4|4|billing=4,cpu=4,node=2|")
            print(f"{job_id}.batch|00:00.035|4|2|cpu=2,mem=0,node=1|cpu=00:00:00,energy=0,fs/disk=58114,mem=12580K")
            print(f"{job_id}.0|00:06.833|3|4|cpu=4,mem=0,node=2|cpu=00:00:03,energy=0,mem=495188K,vmem=501888K")
            continue
        plan = scenario["jobs"].get(job["name"].removeprefix("bench-"), {})
        if job.get("cancelled"):
            print(f"{job_id}|CANCELLED by 0|0:0|0|1|None assigned|Unknown|{END}")
        elif not job["left"]:
            row = _queue_row(job, plan)
            state_now = row[0] if row else "RUNNING"
            print(f"{job_id}|{state_now}|0:0|0|1|None assigned|Unknown|Unknown")
        elif job["sacct_after_leaving"] < plan.get("acct_lag", 0):
            job["sacct_after_leaving"] += 1
            print(f"{job_id}|RUNNING|0:0|3|1|bnode1|{START}|Unknown")
        else:
            nodes = plan.get("nodes", 1)
            node_list = "bnode1" if nodes == 1 else f"bnode[1-{nodes}]"
            print(
                f"{job_id}|{plan.get('state', 'COMPLETED')}|{plan.get('exit', '0:0')}|{plan.get('elapsed', 5)}|"
                f"{nodes}|{node_list}|{START}|{END}"
            )
    return 0


def scancel(args: list[str], scenario: dict, state: dict) -> int:
    for job_id in args:
        if job_id in state["jobs"]:
            state["jobs"][job_id]["cancelled"] = True
    return 0


def main() -> int:
    tool, args = sys.argv[1], sys.argv[2:]
    with open(STATE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        scenario, state = _load()
        with open(STATE / "calls.log", "a") as log:
            log.write(json.dumps([time.monotonic(), tool, *args]) + "\n")
        failed = _fail(tool, scenario, state)
        if failed:
            code, stderr = failed
            print(stderr, file=sys.stderr)
        else:
            code = {"sbatch": sbatch, "squeue": squeue, "sacct": sacct, "scancel": scancel}[tool](args, scenario, state)
        (STATE / "state.json").write_text(json.dumps(state))
    return code


if __name__ == "__main__":
    sys.exit(main())
