"""Every subcommand over a corpus of broken and hostile inputs: each ends with exit status 2
and one line naming what is wrong, never a traceback, and writes nothing it should not.

The corpus runs `bench`'s real `main` in this process (a subprocess per case would cost a
minute); cases that depend on the process environment run the real console script."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SWEEPS, bench, in_place_of, snapshot

from harness.cli import main

LOCAL = (SWEEPS / "local.yaml").read_text()
BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)


class Case:
    """One broken input: `setup(tmp, run)` builds it and returns bench's arguments; the error
    line must hold every word of `words`."""

    def __init__(self, name: str, setup: Callable[[Path, Path], list[str]], *words: str):
        self.name, self.setup, self.words = name, setup, words


def _file(tmp: Path, name: str, content: str | bytes) -> Path:
    path = tmp / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def _sweep(tmp: Path, extra: str = "", replace: tuple[str, str] | None = None) -> str:
    """local.yaml with `replace` done and `extra` appended; an `extra` env section takes the
    place of local.yaml's own (a key stated twice is an error of its own)."""
    text = LOCAL.replace(*replace) if replace else LOCAL
    return str(_file(tmp, "sweep.yaml", in_place_of(text, extra) if extra.startswith("env:") else text + extra))


def _without_collectives(tmp: Path) -> str:
    """local.yaml measuring no collective: its allreduce workload turned off."""
    import yaml

    data = yaml.safe_load(LOCAL)
    data["workloads"]["allreduce"] = False
    return str(_file(tmp, "sweep.yaml", yaml.safe_dump(data)))


def _dry(tmp: Path, sweep: str, *more: str) -> list[str]:
    return ["sweep", sweep, "--dry-run", "--executor", "local", "--out", str(tmp / "out"), *more]


# A profile `bench accept` takes: one reference figure (docs/guides/accept.md)
ACCEPTABLE = "name: lab\nreference:\n  - {workload: allreduce, size: 4M, nodes: 2, busbw_gbps: 1}\n"


def _accept(tmp: Path, profile: str, *args: str) -> list[str]:
    out = str(tmp / "acc")
    return ["accept", "--executor", "slurm", "--cluster", str(_file(tmp, "c.yaml", profile)), "--out", out, *args]


def _slurm_dry(tmp: Path, profile: str) -> list[str]:
    return [
        "sweep",
        str(SWEEPS / "default.yaml"),
        "--dry-run",
        "--executor",
        "slurm",
        "--cluster",
        str(_file(tmp, "c.yaml", profile)),
        "--out",
        str(tmp / "out"),
    ]


def _topology(tmp: Path, text: str | None) -> list[str]:
    """A Slurm dry run of `bench nodes` whose profile names a topology.conf holding `text` (None:
    a path where there is none)."""
    path = _file(tmp, "topology.conf", text) if text is not None else tmp / "no" / "topology.conf"
    profile = _file(tmp, "c.yaml", f"name: c\ntopology: {path}\n")
    return ["nodes", "--executor", "slurm", "--cluster", str(profile), "--nodelist", "g[1-8]", "--dry-run"] + [
        "--out",
        str(tmp / "out"),
    ]


def _submitit_out(tmp: Path, run: Path) -> list[str]:
    profile = str(SWEEPS / "clusters" / "example.yaml")
    hostile = str(tmp / "out" / "a b#c")
    return [
        "sweep",
        str(SWEEPS / "default.yaml"),
        "--executor",
        "submitit",
        "--cluster",
        profile,
        "--dry-run",
        "--out",
        hostile,
    ]


def _copy(run: Path, tmp: Path, name: str = "copy") -> Path:
    dst = tmp / name
    shutil.copytree(run, dst)
    return dst


def _edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _plan_job_name(run: Path, tmp: Path) -> Path:
    copy = _copy(run, tmp)
    _edit_json(copy / "plan.json", lambda p: p["jobs"][0].update(name="../../x"))
    return copy


def _plan_sweep(run: Path, tmp: Path, **fields) -> Path:
    """A copy whose plan.json's recorded sweep has `fields`."""
    copy = _copy(run, tmp)
    _edit_json(copy / "plan.json", lambda p: p["sweep"].update(fields))
    return copy


def _plan_job(run: Path, tmp: Path, **fields) -> Path:
    """A copy whose plan.json's first job has `fields`, as a hand or a hostile user edits it."""
    copy = _copy(run, tmp)
    _edit_json(copy / "plan.json", lambda p: p["jobs"][0].update(fields))
    return copy


def _truncated_summary(run: Path, tmp: Path) -> Path:
    copy = _copy(run, tmp)
    data = (copy / "summary.parquet").read_bytes()
    (copy / "summary.parquet").unlink()
    (copy / "summary.parquet").write_bytes(data[: len(data) // 2])
    return copy


def _not_a_dir_parent(tmp: Path) -> Path:
    f = _file(tmp, "plain-file", "x")
    return f / "sub" / "out"


def _block_device(tmp: Path) -> Path:
    path = tmp / "blk"
    os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(7, 250))  # a loop device number; never opened
    return path


def _fifo(tmp: Path) -> str:
    path = tmp / "fifo"
    os.mkfifo(path)
    return str(path)


def _db(tmp: Path) -> list[str]:
    return ["--db", str(tmp / "h.sqlite")]


CASES = [
    # ---- sweep: files that are not sweeps
    Case("sweep-not-utf8", lambda t, r: _dry(t, str(_file(t, "s.yaml", b"name: \xff\xfe\n"))), "not UTF-8", "0xff"),
    Case(
        "sweep-nested-100k",
        lambda t, r: _dry(t, str(_file(t, "s.yaml", "a: " + "[" * 100_000 + "]" * 100_000))),
        "nested more than 32",
    ),
    Case("sweep-billion-laughs", lambda t, r: _dry(t, str(_file(t, "s.yaml", BILLION_LAUGHS))), "aliases"),
    Case("sweep-too-large", lambda t, r: _dry(t, str(_file(t, "s.yaml", "#" * (1024**2 + 10)))), "larger than"),
    Case("sweep-is-a-directory", lambda t, r: _dry(t, str(t)), "cannot read sweep file"),
    Case("sweep-missing", lambda t, r: _dry(t, str(t / "nope.yaml")), "cannot read sweep file"),
    # the README's sweeps/... outside a checkout (the corpus runs in an empty directory)
    Case(
        "sweep-shipped",
        lambda t, r: _dry(t, "sweeps/testbed.yaml"),
        "sweeps/testbed.yaml: cannot read sweep file",
        f"bench ships sweeps/testbed.yaml as {SWEEPS.resolve() / 'testbed.yaml'}",
    ),
    Case(
        "sweep-slurm-without-profile",
        lambda t, r: ["sweep", "--executor", "slurm", "--out", str(t / "out")],
        "needs the cluster's profile: --cluster FILE or BENCH_CLUSTER=FILE",
        f"start from a copy of {SWEEPS.resolve() / 'clusters' / 'example.yaml'}",  # there outside a checkout too
    ),
    Case(
        "profile-shipped",
        lambda t, r: ["sweep", "--dry-run", "--executor", "slurm", "--cluster", "sweeps/clusters/example.yaml"],
        f"bench ships sweeps/clusters/example.yaml as {SWEEPS.resolve() / 'clusters' / 'example.yaml'}",
    ),
    # submitit writes the run directory's path on #SBATCH lines, where Slurm reads '#' and blanks
    Case("sweep-submitit-directive-path", _submitit_out, "#SBATCH", "' '", "'#'", "--out"),
    Case("sweep-top-level-list", lambda t, r: _dry(t, str(_file(t, "s.yaml", "- a\n"))), "mapping"),
    # ---- a key stated twice, which YAML readers keep the last of without a word
    Case(
        "sweep-duplicate-top-level",
        lambda t, r: _dry(t, _sweep(t, "nodes: [1]\n")),
        "sweep.yaml: not valid YAML at line",
        "key 'nodes' is given twice in one mapping (first at line",
    ),
    Case(
        "sweep-duplicate-in-workloads",
        lambda t, r: _dry(t, _sweep(t, replace=("  allreduce:\n", "  allreduce:\n    iters: 5\n    iters: 6\n"))),
        "'iters' is given twice",
    ),
    Case(
        "sweep-duplicate-set-value",
        lambda t, r: _dry(t, _sweep(t), "--set", "workloads.allreduce.collectives=[{a: 1, a: 2}]"),
        "--set workloads.allreduce.collectives: key 'a' is given twice",
    ),
    Case(
        "profile-duplicate-env",
        lambda t, r: _slurm_dry(t, "name: c\nenv:\n  NCCL_IB_HCA: mlx5_0\n  NCCL_IB_HCA: mlx5_1\n"),
        "c.yaml: not valid YAML at line 4, column 3: key 'NCCL_IB_HCA' is given twice in one mapping (first at line 3)",
    ),
    Case(
        "profile-duplicate-in-reference",
        lambda t, r: _accept(t, ACCEPTABLE.replace("size: 4M,", "size: 4M, size: 8M,")),
        "line 3",
        "key 'size' is given twice",
    ),
    # ---- sweep: values every job would fail on
    Case("yaml11-boolean-env-key", lambda t, r: _dry(t, _sweep(t, 'env: {ON: "1"}\n')), "env", "True", "quote"),
    Case(
        "yaml11-boolean-set-name",
        lambda t, r: _dry(t, _sweep(t, replace=("  default: {}", "  off: {}"))),
        "nccl",
        "False",
        "quote",
    ),
    Case(
        "nccl-expect-unknown-key",
        lambda t, r: _dry(t, _sweep(t, replace=("  default: {}", "  ib: {expect: {network: IB}}"))),
        "nccl.ib.expect.network",
        "unknown key",
        "net_devices",
    ),
    Case(
        "nccl-expect-hostile-value",
        lambda t, r: _dry(t, _sweep(t, replace=("  default: {}", '  ib: {expect: {net: "IB; $(id)"}}'))),
        "nccl.ib.expect.net",
        "not valid",
    ),
    Case(
        "nccl-expect-gdr-not-boolean",
        lambda t, r: _dry(t, _sweep(t, replace=("  default: {}", '  ib: {expect: {gdr: "yes"}}'))),
        "nccl.ib.expect.gdr",
        "true or false",
    ),
    Case(
        "nccl-expect-empty",
        lambda t, r: _dry(t, _sweep(t, replace=("  default: {}", "  ib: {env: {NCCL_IB_HCA: mlx5_0}, expect: {}}"))),
        "nccl.ib.expect",
        "is empty",
    ),
    Case("min-bytes-0", lambda t, r: _dry(t, _sweep(t), "--set", "workloads.allreduce.min_bytes=0"), "min_bytes"),
    Case(
        "min-bytes-negative",
        lambda t, r: _dry(t, _sweep(t), "--set", "workloads.allreduce.min_bytes=-5"),
        "min_bytes",
        "-5",
    ),
    Case("timeout-nan", lambda t, r: _dry(t, _sweep(t), "--set", "timeout_s=.nan"), "timeout_s", "finite"),
    Case("time-limit-inf", lambda t, r: _dry(t, _sweep(t), "--set", "time_limit_min=.inf"), "time_limit_min", "finite"),
    Case(
        "bucket-cap-nan",
        lambda t, r: _dry(t, _sweep(t), "--set", "workloads.synthetic.bucket_cap_mb=.nan"),
        "bucket_cap_mb",
        "finite",
    ),
    Case("steps-huge", lambda t, r: _dry(t, _sweep(t), "--set", "workloads.synthetic.steps=10000000000"), "steps"),
    Case(
        "link-bytes-negative",
        lambda t, r: _dry(t, _sweep(t), "--set", "workloads.allreduce.link_bytes=-1"),
        "link_bytes",
    ),
    Case("soak-negative", lambda t, r: _dry(t, _sweep(t), "--set", "workloads.allreduce.soak_s=-1"), "soak_s", "0"),
    Case(
        "env-reserved-slurm-job-id",
        lambda t, r: _dry(t, _sweep(t, "env: {SLURM_JOB_ID: 'OMP_NUM_THREADS[$(touch /tmp/p)]'}\n")),
        "SLURM_JOB_ID is set by bench",
    ),
    Case(
        "env-control-character",
        lambda t, r: _dry(t, _sweep(t, 'env: {NCCL_DEBUG: "INFO\\u001b[2J"}\n')),
        "control character",
    ),
    Case(
        "env-unicode-line-separator",
        lambda t, r: _dry(t, _sweep(t, 'env: {NCCL_DEBUG: "a\\u2028b"}\n')),
        "control character",
    ),
    Case(
        "env-url-password",
        lambda t, r: _dry(t, _sweep(t, "env: {TORCH_DIST_URL: 'tcp://admin:p4ss@host'}\n")),
        "secret",
        "env_passthrough",
    ),
    Case("env-token-by-name", lambda t, r: _dry(t, _sweep(t, "env: {HF_TOKEN: abc}\n")), "secret"),
    # every recorded text, not only the variables (docs/concepts/hardening.md, "Secrets")
    Case(
        "description-holds-a-token",
        lambda t, r: _dry(t, _sweep(t, replace=("description: CPU", "description: hf_abcdefghijklmnopqrstuvwx CPU"))),
        "description",
        "secret",
    ),
    Case(
        "data-dir-holds-a-url-password",
        lambda t, r: _dry(t, _sweep(t, "\n", replace=("real:", "real:\n    data_dir: 'https://u:p4ss@host/data'"))),
        "data_dir",
        "secret",
    ),
    Case(
        "profile-setup-exports-a-secret",
        lambda t, r: _slurm_dry(t, "name: c\nsetup: ['export WANDB_API_KEY=0123']\n"),
        "setup[0]",
        "secret",
    ),
    Case(
        "profile-image-with-a-password",
        lambda t, r: _slurm_dry(
            t, "name: c\ncontainer: {engine: pyxis, image: 'https://u:p4ss@registry.example/img'}\n"
        ),
        "container.image",
        "secret",
    ),
    Case("env-credential-by-name", lambda t, r: _dry(t, _sweep(t, "env: {GIT_CREDENTIAL: abc}\n")), "secret"),
    Case(
        "passthrough-not-set",
        lambda t, r: ["sweep", _sweep(t, "env_passthrough: [BT_UNSET_SECRET_X]\n"), "--executor", "local"],
        "env_passthrough",
        "BT_UNSET_SECRET_X",
        "not set",
    ),
    Case("passthrough-bad-name", lambda t, r: _dry(t, _sweep(t, "env_passthrough: ['A B']\n")), "env_passthrough"),
    Case("out-under-a-file", lambda t, r: _dry(t, _sweep(t))[:-1] + [str(_not_a_dir_parent(t))], "--out"),
    Case("out-not-empty", lambda t, r: _dry(t, _sweep(t))[:-1] + [str(t)], "not empty"),
    Case("override-not-key-value", lambda t, r: _dry(t, _sweep(t), "--set", "nodes"), "KEY=VALUE"),
    # ---- sweep: cluster profiles
    Case(
        "profile-abbreviated-output",
        lambda t, r: _slurm_dry(t, "name: c\nsbatch_options: ['--outp=/x']\n"),
        "--outp",
        "--output",
    ),
    Case(
        "profile-abbreviated-partition",
        lambda t, r: _slurm_dry(t, "name: c\nsbatch_options: ['--parti=debug']\n"),
        "--partition",
    ),
    # pyxis's options are srun's: a container block's options meet srun's reserved options, and
    # srun_options may not give the container's
    Case(
        "profile-container-option-moves-output",
        lambda t, r: _slurm_dry(
            t,
            "name: c\ncontainer: {engine: pyxis, image: 'nvcr.io#nvidia/pytorch:24.01-py3', options: ['--outp=/x']}\n",
        ),
        "options",
        "--output",
    ),
    Case(
        "profile-srun-option-names-an-image",
        lambda t, r: _slurm_dry(t, "name: c\nsrun_options: ['--container-image=ubuntu']\n"),
        "srun_options",
        "container option",
    ),
    Case(
        "profile-srun-option-abbreviates-a-container-option",
        lambda t, r: _slurm_dry(t, "name: c\nsrun_options: ['--no-container-mount-h']\n"),
        "container option",
    ),
    Case(
        "profile-not-utf8",
        lambda t, r: [
            "sweep",
            "--dry-run",
            "--executor",
            "slurm",
            "--cluster",
            str(_file(t, "p.yaml", b"\x80")),
            "--out",
            str(t / "out"),
        ],
        "not UTF-8",
    ),
    Case("profile-env-reserved", lambda t, r: _slurm_dry(t, "name: c\nenv: {MASTER_PORT: '1'}\n"), "MASTER_PORT"),
    Case("profile-rail-hostile", lambda t, r: _slurm_dry(t, "name: c\nrails: [{hca: 'mlx5_0;id'}]\n"), "rails[0].hca"),
    Case("profile-rail-empty", lambda t, r: _slurm_dry(t, "name: c\nrails: [{}]\n"), "rails", "hca", "ifname"),
    Case(
        "profile-rails-twice", lambda t, r: _slurm_dry(t, "name: c\nrails: [{ifname: ib0}, {ifname: ib0}]\n"), "share"
    ),
    Case(
        "profile-leaf-hostile",
        lambda t, r: _slurm_dry(t, "name: c\nleaves: [{name: 's0;id', nodes: a}]\n"),
        "leaves[0].name",
    ),
    Case(
        "profile-leaf-hostlist",
        lambda t, r: _slurm_dry(t, "name: c\nleaves: [{name: s0, nodes: 'a[1-'}]\n"),
        "leaves[0].nodes",
    ),
    Case(
        "profile-leaves-overlap",
        lambda t, r: _slurm_dry(t, "name: c\nleaves: [{name: s0, nodes: 'g[1-4]'}, {name: s1, nodes: 'g[4-8]'}]\n"),
        "g4 is under two leaves, s0 and s1",
    ),
    Case(
        "profile-topology-and-leaves",
        lambda t, r: _slurm_dry(t, "name: c\ntopology: slurm\nleaves: [{name: s0, nodes: 'g[1-4]'}]\n"),
        "topology",
        "give one of leaves and topology",
    ),
    Case(
        "profile-topology-relative", lambda t, r: _slurm_dry(t, "name: c\ntopology: t.conf\n"), "topology", "absolute"
    ),
    Case("topology-missing", lambda t, r: _topology(t, None), "no/topology.conf", "No such file"),
    Case("topology-huge", lambda t, r: _topology(t, "#" * (16 * 1024**2 + 1)), "topology.conf", "larger than 16 MiB"),
    Case("topology-block", lambda t, r: _topology(t, "BlockName=b1 Nodes=g[1-8]\n"), "line 1", "BlockName"),
    Case(
        "topology-overlap",
        lambda t, r: _topology(t, "SwitchName=s0 Nodes=g[1-4]\nSwitchName=s1 Nodes=g[4-8]\n"),
        "topology.conf",
        "g4 is under two leaves, s0 and s1",
    ),
    Case(
        "topology-hostile-switch",
        lambda t, r: _topology(t, "SwitchName=s0$(id) Nodes=g1\n"),
        "line 1",
        "is not a switch name",
    ),
    Case("only-typo", lambda t, r: _dry(t, _sweep(t), "--only", "nccl=ibb"), "--only nccl", "'ibb' is not among"),
    Case("only-axis", lambda t, r: _dry(t, _sweep(t), "--only", "gpus=2"), "--only", "AXIS one of nodes"),
    Case("exclude-everything", lambda t, r: _dry(t, _sweep(t, "exclude: [{nodes: [1, 2]}]\n")), "leave no job"),
    Case("exclude-unknown-set", lambda t, r: _dry(t, _sweep(t, "exclude: [{nccl: ib}]\n")), "exclude[0].nccl"),
    # ---- resume, collect, status, plot: run directories that are not usable
    Case("resume-not-a-run", lambda t, r: ["sweep", "--resume", str(t)], "plan.json"),
    Case("resume-job-name-escapes", lambda t, r: ["sweep", "--resume", str(_plan_job_name(r, t))], "../../x"),
    Case("collect-job-name-escapes", lambda t, r: ["collect", str(_plan_job_name(r, t))], "../../x"),
    # an edited plan is held to the sweep file's rules: its jobs reach scripts and shells on a resume
    Case(
        "resume-plan-timeout",
        lambda t, r: ["sweep", "--resume", str(_plan_sweep(r, t, timeout_s="300; id"))],
        "plan.json",
        "sweep.timeout_s",
    ),
    Case(
        "resume-plan-reserved-env",
        lambda t, r: ["sweep", "--resume", str(_plan_job(r, t, env=[["PYTHON_EXEC", "/bin/sh -c id #"]]))],
        "plan.json",
        "env.PYTHON_EXEC",
        "cannot set it",
    ),
    Case(
        "resume-plan-env-newline",
        lambda t, r: ["sweep", "--resume", str(_plan_job(r, t, nccl_env=[["NCCL_DEBUG", "INFO\nid"]]))],
        "nccl_env.NCCL_DEBUG",
        "one line",
    ),
    Case(
        "resume-plan-launcher",
        lambda t, r: ["sweep", "--resume", str(_plan_job(r, t, launcher="$(id)"))],
        "launcher is '$(id)'",
        "torchrun, srun",
    ),
    Case(
        "resume-plan-time-limit",
        lambda t, r: ["sweep", "--resume", str(_plan_job(r, t, time_limit_min="1; id"))],
        "time_limit_min is '1; id'",
    ),
    Case(
        "resume-plan-set-name",
        lambda t, r: ["sweep", "--resume", str(_plan_job(r, t, nccl_config="a b"))],
        "nccl_config 'a b'",
    ),
    Case(
        "collect-plan-passthrough",
        lambda t, r: ["collect", str(_plan_job(r, t, passthrough=["BASH_ENV"]))],
        "passthrough",
        "BASH_ENV",
    ),
    Case("collect-jobs-list", lambda t, r: ["collect", str(_jobs_json(r, t, {"jobs": []}))], "jobs.json", "list"),
    Case(
        "status-table-newer",
        lambda t, r: ["status", str(_jobs_json(r, t, {"table_version": 2, "jobs": {}}))],
        "jobs.json",
        "table_version 2 was written by a newer bench; this one reads 1",
    ),
    Case(
        "status-plan-newer",
        lambda t, r: ["status", str(_plan_edit(r, t, lambda p: p.update(plan_version=2)))],
        "plan.json",
        "plan_version 2 was written by a newer bench",
    ),
    Case(
        "collect-plan-unversioned",
        lambda t, r: ["collect", str(_plan_edit(r, t, lambda p: p.pop("plan_version")))],
        "plan.json",
        "plan_version required 1, found None",
    ),
    Case("collect-job-row-types", lambda t, r: ["collect", str(_jobs_row(r, t, {"state": 3}))], "jobs.json", "state"),
    Case("status-job-row-not-object", lambda t, r: ["status", str(_jobs_row(r, t, None, whole=[1]))], "jobs.json"),
    Case("collect-plan-not-utf8", lambda t, r: ["collect", str(_plan_bytes(r, t, b"\xff"))], "plan.json"),
    Case(
        "collect-plan-jobs-not-list",
        lambda t, r: ["collect", str(_plan_edit(r, t, lambda p: p.update(jobs=7)))],
        "plan.json",
        "malformed",
    ),
    Case("collect-non-utf8-dir-name", lambda t, r: ["collect", os.fsdecode(bytes(t) + b"/run-\xff")], "not UTF-8"),
    Case(
        "plot-truncated-summary", lambda t, r: ["plot", str(_truncated_summary(r, t))], "summary.parquet", "unreadable"
    ),
    Case("plot-no-summary", lambda t, r: ["plot", str(_no_summary(r, t))], "bench collect"),
    # ---- accept (docs/guides/accept.md): refused before anything runs
    Case("accept-no-reference", lambda t, r: _accept(t, "name: lab\n"), "states no reference figures", "reference:"),
    Case("accept-bytes", lambda t, r: _accept(t, ACCEPTABLE, "--bytes", "12Q"), "12Q"),
    Case("accept-threshold", lambda t, r: _accept(t, ACCEPTABLE, "--threshold", "150%"), "--threshold"),
    Case("accept-no-sweep", lambda t, r: _accept(t, ACCEPTABLE, "--sweep", str(t / "none.yaml")), "none.yaml"),
    Case(
        "accept-bad-reference",
        lambda t, r: _accept(t, ACCEPTABLE.replace("size: 4M", "size: 12Q")),
        "reference[0].size",
    ),
    # ---- nodes
    Case(
        "nodes-bytes", lambda t, r: ["nodes", "--executor", "local", "--bytes", "12Q", "--out", str(t / "out")], "12Q"
    ),
    Case("nodes-threshold", lambda t, r: ["nodes", "--executor", "local", "--threshold", "150%"], "--threshold"),
    Case(
        "nodes-partners",
        lambda t, r: ["nodes", "--executor", "local", "--nodes", "8", "--partners", "2"],
        "--partners",
        "from 3",
    ),
    Case("nodes-step-timeout", lambda t, r: ["nodes", "--executor", "local", "--step-timeout", "0"], "--step-timeout"),
    Case("nodes-soak-zero", lambda t, r: ["nodes", "--executor", "local", "--soak", "0"], "--soak", "above 0"),
    Case("nodes-soak-word", lambda t, r: ["nodes", "--executor", "local", "--soak", "1h"], "--soak", "'1h'"),
    Case("nodes-soak-nan", lambda t, r: ["nodes", "--executor", "local", "--soak", "nan"], "--soak", "above 0"),
    Case("nodes-dcgm-level", lambda t, r: ["nodes", "--executor", "local", "--dcgm", "5"], "--dcgm", "1, 2, 3, 4"),
    Case("accept-soak-long", lambda t, r: ["accept", "--executor", "local", "--soak", "20000"], "--soak", "a week"),
    Case(
        "accept-soak-no-collective",  # a training reference alone, and a sweep that measures no collective
        lambda t, r: _accept(
            t,
            "name: lab\nreference:\n  - {workload: synthetic, scaling: weak, nodes: 2, images_per_s: 30}\n",
            *("--soak", "1", "--dry-run", "--sweep", _without_collectives(t)),
        ),
        "--soak",
        "measures no collective to soak",
    ),
    Case("nodes-time-limit", lambda t, r: ["nodes", "--executor", "local", "--time-limit", "-5"], "--time-limit"),
    Case("nodes-one-node", lambda t, r: ["nodes", "--executor", "local", "--nodes", "1"], "at least 2 nodes"),
    Case("nodes-nodelist-local", lambda t, r: ["nodes", "--executor", "local", "--nodelist", "n1"], "--nodelist"),
    Case("nodes-cluster-local", lambda t, r: ["nodes", "--executor", "local", "--cluster", "c.yaml"], "--cluster"),
    Case("nodes-rails-local", lambda t, r: ["nodes", "--executor", "local", "--rails"], "--rails", "loopback"),
    Case(
        "nodes-rails-none",
        lambda t, r: [
            "nodes",
            "--executor",
            "slurm",
            "--dry-run",
            "--rails",
            "--nodelist",
            "n[1-2]",
            "--cluster",
            str(_file(t, "c.yaml", "name: lab\n")),
            "--out",
            str(t / "out"),
        ],
        "--rails",
        "lab lists no rails",
    ),
    Case(
        "nodes-hostile-nodelist",
        lambda t, r: (
            ["nodes", "--executor", "slurm", "--cluster", str(SWEEPS / "clusters" / "testbed.yaml")]
            + ["--nodelist", "a;$(id)", "--dry-run", "--out", str(t / "out")]
        ),
        "not a Slurm hostlist",
    ),
    Case("nodes-report-not-a-check", lambda t, r: ["nodes", "--report", str(r)], "check.json", "not the run directory"),
    Case("nodes-report-and-out", lambda t, r: ["nodes", "--report", str(r), "--out", str(t / "out")], "--report"),
    # ---- export
    Case("export-not-a-run", lambda t, r: ["export", str(t), "--format", "influx"], "plan.json"),
    Case("export-cluster", lambda t, r: ["export", str(r), "--format", "influx", "--cluster", "a b"], "--cluster"),
    Case("export-out-is-dir", lambda t, r: ["export", str(r), "--format", "openmetrics", "--out", str(t)], "--out"),
    Case("export-no-summary", lambda t, r: ["export", str(_no_summary(r, t)), "--format", "influx"], "bench collect"),
    Case("dashboard-no-history", lambda t, r: ["dashboard", *_db(t), "--out", str(t / "site")], "no history database"),
    Case(
        "dashboard-out-is-file",
        lambda t, r: ["dashboard", *_db_with(r, t), "--out", str(_file(t, "site", "x"))],
        "--out",
        "is a file",
    ),
    Case(
        "dashboard-out-not-a-site",
        lambda t, r: ["dashboard", *_db_with(r, t), "--out", str(_file(t, "notes.txt", "mine").parent)],
        "--out",
        "is not a dashboard bench wrote",
    ),
    Case(
        "dashboard-damaged-band",
        lambda t, r: ["dashboard", *_damaged_band(r, t), "--out", str(t / "site")],
        "gate band",
        "is damaged",
        "bench history remove",
    ),
    # ---- compare
    Case("compare-csv-is-dir", lambda t, r: ["compare", str(r), str(r), "--csv", str(t)], "--csv", "directory"),
    Case(
        "compare-csv-no-parent",
        lambda t, r: ["compare", str(r), str(r), "--csv", str(t / "no" / "x.csv")],
        "no such directory",
    ),
    Case(
        "compare-csv-block-device",
        lambda t, r: ["compare", str(r), str(r), "--csv", str(_block_device(t))],
        "block device",
    ),
    Case(
        "compare-markdown-dangling-link",
        lambda t, r: ["compare", str(r), str(r), "--markdown", str(_dangling(t))],
        "does not exist",
    ),
    Case(
        "compare-plots-under-a-file",
        lambda t, r: ["compare", str(r), str(r), "--plots", str(_not_a_dir_parent(t))],
        "--plots",
        "not a directory",
    ),
    Case("compare-threshold", lambda t, r: ["compare", str(r), str(r), "--threshold", "lots"], "--threshold"),
    Case("compare-labels", lambda t, r: ["compare", str(r), str(r), "--labels", "one"], "--labels"),
    Case("compare-not-a-run", lambda t, r: ["compare", str(r), str(t)], "plan.json"),
    Case("compare-one-run-no-across", lambda t, r: ["compare", str(r)], "--across"),
    # ---- history
    Case(
        "history-add-no-dir",
        lambda t, r: ["history", "add", "--cluster", "c", *_db(t)],
        "bench history add: error: the following arguments are required: DIR",
    ),
    Case(
        "history-add-db-under-a-file",
        lambda t, r: ["history", "add", str(r), "--cluster", "c", "--db", str(_not_a_dir_parent(t))],
        "--db",
    ),
    Case(
        "history-add-db-is-dir",
        lambda t, r: ["history", "add", str(r), "--cluster", "c", "--db", str(t)],
        "is a directory",
    ),
    Case(
        "history-add-label-control",
        lambda t, r: ["history", "add", str(r), "--cluster", "c", "--label", "night\x1b[2J\x07", *_db(t)],
        "--label",
        "printable",
    ),
    Case("history-add-cluster-empty", lambda t, r: ["history", "add", str(r), "--cluster", " ", *_db(t)], "--cluster"),
    Case(
        "history-plot-out-dir",
        lambda t, r: ["history", "plot", "--cluster", "c", "--out", str(t), *_db_with(r, t)],
        "--out",
        "directory",
    ),
    Case(
        "history-plot-out-under-a-file",
        lambda t, r: ["history", "plot", "--cluster", "c", "--out", str(_not_a_dir_parent(t)), *_db_with(r, t)],
        "--out",
    ),
    Case("history-remove-not-id", lambda t, r: ["history", "remove", "x", *_db(t)], "id"),
    Case(
        "history-db-not-sqlite",
        lambda t, r: ["history", "list", "--db", str(_file(t, "h.sqlite", "hello"))],
        "not a bench history",
    ),
    # ---- history: the typos of a tired engineer, each refused with nothing created (docs/guides/fleet.md)
    *(
        Case(f"{command}-{what}", lambda t, r, argv=argv, db=db: [*argv(t, r), "--db", db], *words)
        for command, argv in (
            ("history-add", lambda t, r: ["history", "add", str(r), "--cluster", "c"]),
            ("regress", lambda t, r: ["regress", str(r), "--cluster", "c"]),
            ("history-count", lambda t, r: ["history", "list", "--count", "--cluster", "c"]),
        )
        for what, db, words in (
            ("mistyped-scheme", "postgresq://bench@127.0.0.1:5439/bench", ("'postgresq:' is not a history's scheme",)),
            ("scheme-one-slash", "postgresql:/bench@127.0.0.1/bench", ("a URL begins postgresql://",)),
            ("no-scheme", "bench@127.0.0.1:5439/bench", ("without its scheme",)),
            ("no-such-file", "history.sqlite", ("no history database", "--create")),
        )
    ),
    Case(
        "history-add-mistyped-cluster",
        lambda t, r: ["history", "add", str(_later(r, t)), "--cluster", "cc", *_db_with(r, t)],
        "--cluster 'cc'",
        "did you mean 'c'? its clusters: c",
        "--new-cluster",
    ),
    Case(
        "history-add-new-cluster-known",
        lambda t, r: ["history", "add", str(_later(r, t)), "--cluster", "c", "--new-cluster", *_db_with(r, t)],
        "--new-cluster",
        "cluster 'c' has 1 run in",
    ),
    *(
        Case(
            f"history-add-created-{name}",
            lambda t, r, created=created: [
                "history",
                "add",
                str(_dated(r, t, created)),
                "--cluster",
                "c",
                "--create",
                *_db(t),
            ],
            "plan.json: created",
            "is not a time bench writes",
            "years 1970-9998",
        )
        for name, created in (
            ("garbage", "garbage"),
            ("number", 20261202),
            ("no-offset", "2026-12-02T03:00:00"),
            ("year-9999", "9999-12-31T23:00:00-05:00"),
            ("year-1", "0001-01-01T00:30:00+01:00"),
            ("missing", None),
        )
    ),
    Case(
        "history-list-mistyped-cluster",
        lambda t, r: ["history", "list", "--count", "--cluster", "cc", *_db_with(r, t)],
        "did you mean 'c'",
    ),
    Case(
        "history-create-not-add",
        lambda t, r: ["history", "list", "--create", *_db(t)],
        "bench history list: error: unrecognized arguments: --create",
    ),
    Case("regress-mistyped-cluster", lambda t, r: ["regress", str(r), "--cluster", "cc", *_db_with(r, t)], "'cc'"),
    # ---- regress
    Case(
        "regress-out-under-a-file",
        lambda t, r: ["regress", str(r), "--cluster", "c", "--out", str(_not_a_dir_parent(t)), *_db(t)],
        "--out",
    ),
    Case(
        "regress-baseline",
        lambda t, r: ["regress", str(r), "--cluster", "c", "--baseline", "median:1", *_db(t)],
        "baseline",
    ),
    Case("regress-no-history", lambda t, r: ["regress", str(r), "--cluster", "c", *_db(t)], "history"),
    Case(
        "regress-must-catch-over-100",
        lambda t, r: ["regress", str(r), "--cluster", "c", "--must-catch", "101%", *_db_with(r, t)],
        "--must-catch '101%' must be at least 0% and at most 100%",
    ),
    # ---- report
    Case("report-out-dir", lambda t, r: ["report", str(r), "--out", str(t)], "--out", "directory"),
    Case("report-out-under-a-file", lambda t, r: ["report", str(r), "--out", str(_not_a_dir_parent(t))], "--out"),
    Case("report-not-a-run", lambda t, r: ["report", str(t)], "plan.json"),
    # ---- predict
    Case("predict-nodes-zero", lambda t, r: ["predict", str(r), "--nodes", "0"], "--nodes", "from 1 to 100,000"),
    Case("predict-set-unknown", lambda t, r: ["predict", str(r), "--set", "gpus=8"], "--set", "must be one of"),
    Case(
        "predict-set-no-before",
        lambda t, r: ["predict", str(r), "--set", "network_gbps_per_node=50"],
        "states no network_gbps_per_node to change",
        "network_gbps_per_node=BEFORE:AFTER",
    ),
    Case(
        "predict-set-gbits",
        lambda t, r: ["predict", str(r), "--set", "network_gbps_per_node=400:3200", "--set", "nics_per_node=8:8"],
        "network_gbps_per_node",
        "reads like Gbit/s",
    ),
    Case("predict-out-dir", lambda t, r: ["predict", str(r), "--out", str(t)], "--out", "directory"),
    Case("predict-not-collected", lambda t, r: ["predict", str(t)], "no summary.parquet", "bench collect"),
    # ---- transport: logs that are not there or not files
    Case("transport-missing", lambda t, r: ["transport", str(t / "nope.log")], "nope.log", "no such file"),
    Case("transport-fifo", lambda t, r: ["transport", _fifo(t)], "fifo", "not a regular file"),
    # ---- cluster profile: stated hardware and reference figures (docs/concepts/expected.md)
    Case(
        "profile-hardware-negative",
        lambda t, r: _slurm_dry(t, "name: x\nhardware: {network_gbps_per_node: -400}\n"),
        "hardware.network_gbps_per_node",
        "must be a number of GB/s from 0.001 to 1e6",
    ),
    Case(  # a rate of almost nothing divided every plan's time by zero (exit 70)
        "profile-hardware-denormal",
        lambda t, r: _slurm_dry(t, "name: x\nhardware: {network_gbps_per_node: 5.0e-324, nics_per_node: 8}\n"),
        "hardware.network_gbps_per_node",
        "from 0.001 to 1e6, found 5e-324",
    ),
    Case(  # a peak of almost nothing estimated 0 img/s
        "profile-peak-tiny",
        lambda t, r: _slurm_dry(t, "name: x\nhardware: {peak_tflops_per_gpu: 1.0e-300}\n"),
        "hardware.peak_tflops_per_gpu",
        "must be a number of TFLOP/s from 0.001 to 1e6",
    ),
    Case(
        "profile-hardware-in-gbits",  # 8 x 400 Gb/s written as Gbit/s: refused, never 8x the truth
        lambda t, r: _slurm_dry(t, "name: x\nhardware: {network_gbps_per_node: 3200}\n"),
        "hardware.network_gbps_per_node",
        "reads like Gbit/s, which is 400 GB/s; give 400",
    ),
    Case(
        "profile-reference-without-figure",
        lambda t, r: _slurm_dry(t, "name: x\nreference:\n  - {workload: allreduce, size: 1G, nodes: 2}\n"),
        "reference[0].busbw_gbps",
        "positive busbw_gbps",
    ),
    Case(
        "profile-reference-wrong-figure",
        lambda t, r: _slurm_dry(t, "name: x\nreference:\n  - {workload: synthetic, nodes: 1, busbw_gbps: 40}\n"),
        "reference[0]",
        "images_per_s",
    ),
]


def _jobs_json(run: Path, tmp: Path, table: dict) -> Path:
    copy = _copy(run, tmp)
    (copy / "jobs.json").write_text(json.dumps({"table_version": 1, **table}))
    return copy


def _jobs_row(run: Path, tmp: Path, update: dict | None, whole: object = None) -> Path:
    copy = _copy(run, tmp)

    def edit(t: dict) -> None:
        name = next(iter(t["jobs"]))
        if update is None:
            t["jobs"][name] = whole
        else:
            t["jobs"][name].update(update)

    _edit_json(copy / "jobs.json", edit)
    return copy


def _plan_bytes(run: Path, tmp: Path, data: bytes) -> Path:
    copy = _copy(run, tmp)
    (copy / "plan.json").write_bytes(data)
    return copy


def _plan_edit(run: Path, tmp: Path, edit: Callable[[dict], None]) -> Path:
    copy = _copy(run, tmp)
    _edit_json(copy / "plan.json", edit)
    return copy


def _no_summary(run: Path, tmp: Path) -> Path:
    copy = _copy(run, tmp)
    for name in ("summary.parquet", "summary.csv", "samples.parquet"):
        (copy / name).unlink()
    return copy


def _dangling(tmp: Path) -> Path:
    link = tmp / "dangling.md"
    link.symlink_to(tmp / "nowhere" / "x.md")
    return link


def _damaged_band(run: Path, tmp: Path) -> list[str]:
    """A history whose run has a gate band with a key that is no key (another tool wrote it)."""
    args = _db_with(run, tmp)
    con = sqlite3.connect(args[1])
    con.execute(
        "INSERT INTO gate_bands VALUES (1, 'busbw_gbps', '[\"<b>\"', 1, 1, 1, 1, 'slower', 'between runs', 0.05)"
    )
    con.commit()
    con.close()
    return args


def _later(run: Path, tmp: Path) -> Path:
    """A copy of the run planned later: a run of its own to the history."""
    copy = _copy(run, tmp, "later")
    _edit_json(copy / "plan.json", lambda p: p.update(created="2099-01-01T00:00:00+00:00"))
    return copy


def _dated(run: Path, tmp: Path, created: object) -> Path:
    """A copy of the run whose plan names `created` as its time (None: names none)."""
    copy = _copy(run, tmp, "dated")
    _edit_json(copy / "plan.json", lambda p: p.update(created=created) if created is not None else p.pop("created"))
    return copy


def _db_with(run: Path, tmp: Path) -> list[str]:
    """A history holding the run under cluster c."""
    db = tmp / "with.sqlite"
    assert main(["history", "add", str(run), "--create", "--cluster", "c", "--db", str(db)]) == 0
    return ["--db", str(db)]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_input_gives_one_line_and_exit_2(case, real_run, tmp_path, capsys, monkeypatch, slurm_stand_ins):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BENCH_CLUSTER", raising=False)  # the cases name their profiles
    argv = case.setup(tmp_path, real_run)
    capsys.readouterr()
    before = snapshot(tmp_path)
    status = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2, f"exit {status}\nstdout: {out}\nstderr: {err}"
    assert len(lines) == 1 and re.match(rf"bench {argv[0]}( [a-z]+)?: error: ", lines[0]), err  # (a subcommand's)
    assert "Traceback" not in out + err
    for word in case.words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    assert snapshot(tmp_path) == before, "a refused command changed the directory"
    assert not (tmp_path / "out").exists()
    assert slurm_stand_ins.calls() == [], "a refused command called Slurm"


def test_the_corpus_covers_every_subcommand():
    from harness.commands import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices) - {"run"}  # run: tested below
    covered = {c.name.split("-")[0] for c in CASES}
    assert commands <= covered, commands - covered


def test_bench_run_help_lists_the_workloads(capsys):
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: bench run WORKLOAD") and "allreduce, synthetic, real, transformer, gemm" in out


def test_bench_run_says_why_a_launch_is_unusable():
    """RANK 5 of a world of 2: no rank is trustworthy, so the process says why (it was silent)."""
    r = bench(
        "run",
        "allreduce",
        env={"RANK": "5", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
        check=False,
    )
    assert r.returncode == 2 and r.stderr.strip() == (
        "bench run allreduce: error: rank 5 is not below the world size 2 (check RANK/SLURM_PROCID)"
    )


@pytest.mark.parametrize(
    "args,words",
    [
        (["-b", "0"], "size '0' must be positive (see bench run allreduce --help)"),
        (["--link-bytes", "-1"], "--link-bytes"),
        (["--soak", "-1"], "--soak must be at least 0"),
        (["--soak", "5", "--groups", "intra"], "--soak: --groups intra has no world group"),
        (["-n", "0"], "--iters must be at least 1"),
    ],
)
def test_bench_run_bad_flags(args, words):
    r = bench("run", "allreduce", *args, "--device", "cpu", check=False)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "value,words",
    [("9", "must be at most 8, found 9"), ("0", "must be at least 1, found 0"), ("2;id", "'2;id' is not an integer")],
)
def test_bench_collect_bad_workers(value, words, tmp_path):
    """--workers forks that many processes: a count past MAX_WORKERS is refused, not obeyed."""
    r = bench("collect", str(tmp_path), "--workers", value, check=False)
    assert r.returncode == 2, r.describe()
    assert r.stderr.strip() == f"bench collect: error: argument --workers: {words} (see bench collect --help)"


def test_an_unexpected_error_is_one_line_with_status_70(monkeypatch, capsys):
    """A bug still ends in one line; BENCH_DEBUG=1 gives the traceback to whoever debugs it."""
    from harness.commands import running

    def boom(args):
        raise KeyError("surprise")

    monkeypatch.setattr(running, "cmd_status", boom)
    monkeypatch.delenv("BENCH_DEBUG", raising=False)
    assert main(["status", "x"]) == 70
    err = capsys.readouterr().err
    assert err.startswith("bench status: internal error") and "KeyError: 'surprise'" in err
    assert len(err.strip().splitlines()) == 1
    monkeypatch.setenv("BENCH_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["status", "x"])
