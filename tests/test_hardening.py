"""What bench does to files that are not plain, to a directory two sweeps want, to results that
are not their job's, and to secrets (docs/concepts/hardening.md)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import SWEEPS, bench, planned_later

from benchmarks.common import captured_variables, redacted, secret_name
from harness.cli import main


def _csv_of(run: Path, capsys) -> str:
    """The CSV `bench compare RUN RUN` writes, from a regular file."""
    out = run.parent / "plain.csv"
    assert main(["compare", str(run), str(run), "--csv", str(out)]) == 0
    capsys.readouterr()
    return out.read_text()


@pytest.mark.slow
def test_a_character_device_is_written_through_not_replaced(real_run, tmp_path, capsys):
    """`--csv /dev/full` as root replaced the device node with a regular file. A device made
    here with /dev/full's and /dev/null's numbers stands in for them."""
    full, null = tmp_path / "full", tmp_path / "null"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    assert main(["compare", str(real_run), str(real_run), "--csv", str(full)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"bench compare: error: --csv {full}: cannot write (No space left on device)"
    assert main(["compare", str(real_run), str(real_run), "--csv", str(null), "--markdown", str(null)]) == 0
    for dev in (full, null):
        assert stat.S_ISCHR(dev.lstat().st_mode), f"{dev} was replaced"
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.slow
def test_a_workloads_json_onto_a_device_or_fifo_is_written_through(tmp_path):
    """`bench run WORKLOAD --json /dev/null` as root renamed a file over the device. Real ranks
    write their result onto a device made here with /dev/null's numbers, and into a FIFO a
    reader drains: both stay what they were."""
    null, fifo = tmp_path / "null", tmp_path / "fifo"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    for out in (null, fifo):
        bench("run", "allreduce", "-b", "4K", "-e", "4K", "-n", "2", "-w", "1", "--json", str(out), timeout=120)
    reader.join(timeout=30)
    assert stat.S_ISCHR(null.lstat().st_mode) and os.stat(null).st_rdev == os.makedev(1, 3)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and json.loads(got[0])["workload"] == "allreduce"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "null"]  # no file left beside them


def test_a_symlink_keeps_its_link_and_its_target_gets_the_output(real_run, tmp_path, capsys):
    expected = _csv_of(real_run, capsys)
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    assert main(["compare", str(real_run), str(real_run), "--csv", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == expected
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the replaced file's mode is kept


@pytest.mark.slow
def test_a_fifo_is_written_through(real_run, tmp_path, capsys):
    expected = _csv_of(real_run, capsys)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    status = main(["compare", str(real_run), str(real_run), "--csv", str(fifo)])
    reader.join(timeout=60)
    if reader.is_alive():  # nothing was written into the pipe: let the reader go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert status == 0 and got == [expected] and stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.slow
def test_dev_stdout_goes_to_stdout_and_its_redirect_is_kept(real_run, tmp_path, capsys):
    """`--csv /dev/stdout > out.txt`: the CSV lands in out.txt through the shell's own descriptor
    (appended), and out.txt is not replaced behind it."""
    expected = _csv_of(real_run, capsys)
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        p = subprocess.run(
            [sys.executable, "-m", "harness.cli", "compare", str(real_run), str(real_run), "--csv", "/dev/stdout"],
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
        inode = os.fstat(f.fileno()).st_ino
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert expected in text and text.rstrip().endswith("wrote /dev/stdout")
    assert out.stat().st_ino == inode


@pytest.mark.slow
def test_report_and_history_plot_write_through_links(real_run, tmp_path, capsys):
    for args, name in (
        (["report", str(real_run)], "report.html"),
        (["history", "plot", "--cluster", "c", "--db", str(tmp_path / "h.sqlite")], "history.png"),
    ):
        if args[0] == "history":
            assert (
                main(
                    ["history", "add", str(real_run), "--create", "--cluster", "c", "--db", str(tmp_path / "h.sqlite")]
                )
                == 0
            )
        target, link = tmp_path / f"real-{name}", tmp_path / name
        target.write_text("old")
        link.symlink_to(target)
        assert main([*args, "--out", str(link)]) == 0, capsys.readouterr().err
        assert link.is_symlink() and target.read_bytes() != b"old"
        assert target.read_bytes()[:4] in (b"<!DO", b"\x89PNG")


@pytest.mark.slow
def test_files_honour_the_umask(tmp_path):
    """Every file a sweep writes has 0666 less the umask, as open(2) gives: with umask 027 the
    group can read plan.json, summary.csv and the results, and others cannot."""
    out = tmp_path / "run"
    code = "import os, sys; os.umask(0o027); from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "sweep",
            str(SWEEPS / "local.yaml"),
            "--executor",
            "local",
            "--out",
            str(out),
            "--max-nodes",
            "1",
            "--set",
            "gpus_per_node=[1]",
            "--set",
            "workloads.allreduce.max_bytes=64K",
            "--set",
            "workloads.synthetic.steps=2",
            "--set",
            "workloads.synthetic.warmup_steps=1",
            "--set",
            "workloads.synthetic.scaling=[weak]",
            "--set",
            "workloads.real=false",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    files = [f for f in out.rglob("*") if f.is_file() and not f.is_symlink() and f.name != ".lock"]
    assert {"plan.json", "jobs.json", "summary.csv", "summary.parquet", "samples.parquet", "allreduce.json"} <= {
        f.name for f in files
    }
    modes = {str(f.relative_to(out)): oct(stat.S_IMODE(f.stat().st_mode)) for f in files}
    assert set(modes.values()) == {"0o640"}, modes


def test_two_sweeps_into_one_directory(tmp_path):
    """The lock is taken before anything is written: while another bench process holds it (as
    one does from before its first file to the end of its sweep), a second sweep into the same
    --out is refused and writes nothing."""
    import fcntl

    out = tmp_path / "run"
    out.mkdir()
    fd = os.open(out / ".lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        r = bench(
            "sweep", str(SWEEPS / "local.yaml"), "--dry-run", "--executor", "local", "--out", str(out), check=False
        )
    finally:
        os.close(fd)
    assert r.returncode == 2 and r.stderr.strip() == f"bench sweep: error: {out} is in use by another bench process"
    assert [p.name for p in out.iterdir()] == [".lock"]
    # once free, the first sweep claims it; a second one, of another sweep, is refused after it
    bench("sweep", str(SWEEPS / "local.yaml"), "--dry-run", "--executor", "local", "--out", str(out))
    plan = (out / "plan.json").read_bytes()
    r = bench("sweep", str(SWEEPS / "default.yaml"), "--dry-run", "--executor", "slurm", "--out", str(out), check=False)
    assert r.returncode == 2 and "already holds a run" in r.stderr
    assert (out / "plan.json").read_bytes() == plan


def test_a_directory_that_is_not_empty_is_not_a_run_directory(tmp_path):
    (tmp_path / "precious.txt").write_text("keep")
    r = bench(
        "sweep", str(SWEEPS / "local.yaml"), "--dry-run", "--executor", "local", "--out", str(tmp_path), check=False
    )
    assert r.returncode == 2 and "not empty" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]


# --------------------------------------------------------------------------- foreign results


def _tamper(run: Path, tmp: Path, name: str, edit) -> Path:
    copy = tmp / name
    shutil.copytree(run, copy)
    result = next(copy.glob("jobs/n2-*/allreduce.json"))
    data = json.loads(result.read_text())
    edit(data, copy)
    result.write_text(json.dumps(data))
    return result


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,edit,words",
    [
        ("world-size", lambda d, c: d.update(world_size=1), "world size is 1, but job n2-"),
        ("workload", lambda d, c: d.update(workload="synthetic"), "workload is 'synthetic', not 'allreduce'"),
        ("other-job", lambda d, c: d.update(argv=[a.replace("n2-", "n1-") for a in d["argv"]]), "it was written as"),
        ("rows-empty", lambda d, c: d.update(rows=[]), "incomplete result (ValueError: no rows"),
        ("environment-null", lambda d, c: d.update(environment=None), "incomplete result (TypeError"),
        ("hosts-not-names", lambda d, c: d["environment"].update(hosts=[1, 2]), "not a list of host names"),
        ("schema", lambda d, c: d.update(schema_version=99), "schema_version required 1, found 99"),
        # these once reached the samples table and ended collect with an internal error
        ("samples-text", lambda d, c: d["rows"][0].update(samples_us=["x", 1.0]), "samples are not all numbers"),
        ("samples-bool", lambda d, c: d["rows"][-1].update(samples_us=[True, 1.0]), "samples are not all numbers"),
        ("samples-not-list", lambda d, c: d["rows"][0].update(samples_us=5), "samples are not lists"),
        # free text where the catalog has names: 30,000 characters made `bench plot` take 3.7 GB
        ("group-long", lambda d, c: d["rows"][0].update(group="x" * 30_000), "a collective or group the catalog"),
        # these the summary's columns cannot hold: building the table ended collect with an internal error
        ("figure-text", lambda d, c: d["rows"][0].update(time_us="5"), "time_us is '5', not a number"),
        ("count-bool", lambda d, c: d["rows"][1].update(wrong=True), "wrong is True, not a whole number"),
        ("count-float", lambda d, c: d["rows"][-1].update(oop_wrong=0.5), "oop_wrong is 0.5, not a whole number"),
        ("dtype-number", lambda d, c: d["rows"][0].update(dtype=4), "dtype is 4, not text"),
        ("figure-huge", lambda d, c: d["rows"][0].update(busbw_gbps=2**60), "busbw_gbps is 1152921504606846976, past"),
        ("size-huge", lambda d, c: d["rows"][0].update(size_bytes=2**70), "size_bytes is a whole number of 71 bits"),
    ],
)
def test_a_result_that_is_not_its_jobs_is_left_out_with_a_warning(real_run, tmp_path, name, edit, words):
    result = _tamper(real_run, tmp_path, name, edit)
    run = result.parent.parent.parent
    r = bench("collect", str(run))
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and str(result) in warnings[0] and words in warnings[0], r.stderr
    import pyarrow.parquet as pq

    rows = pq.read_table(run / "summary.parquet").to_pylist()
    mine = [x for x in rows if x["job"] == result.parent.name and x["workload"] == "allreduce"]
    assert [x["status"] for x in mine] == ["MISSING"]
    assert all(x["status"] == "COMPLETED" for x in rows if x not in mine)


@pytest.mark.slow
@pytest.mark.parametrize(
    "field,value,words",
    [
        ("step_time_ms", 0.0, "outside (0, "),
        ("images_per_s", 1e308, "outside (0, "),
        ("images_per_s_per_gpu", -1.0, "outside (0, "),
        ("step_time_ms", 1e300, "outside (0, "),
        # what the summary's columns cannot hold once ended collect with an internal error
        ("step_time_ms", "98.5", "step_time_ms is '98.5', not a number"),
        ("batch_size", 2.5, "batch_size is 2.5, not a whole number"),
        ("data_wait_fraction", [0.1], "data_wait_fraction is [0.1], not a number"),
    ],
)
def test_a_training_figure_no_run_reaches_is_left_out(real_run, tmp_path, field, value, words):
    """A figure collect once accepted and the plots could not draw (tokens/s 1e308 ended `bench
    plot` and `bench report` with exit 70), or one the summary cannot hold: the result is left
    out with a warning, and the plots and the report are drawn from the rest."""
    copy = tmp_path / "run"
    shutil.copytree(real_run, copy)
    result = next(copy.glob("jobs/n2-*/synthetic-weak.json"))
    data = json.loads(result.read_text())
    data[field] = value
    result.write_text(json.dumps(data))
    r = bench("collect", str(copy))
    assert f"{field} is " in r.stderr and words in r.stderr, r.stderr
    assert bench("plot", str(copy)).returncode == 0
    assert bench("report", str(copy)).returncode == 0


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize(
    "name,value,kept",
    [
        ("NCCL_IB_PKEY", "0x8001", "0x8001"),  # a partition key, not a secret
        ("NCCL_SOCKET_IFNAME", "ib0", "ib0"),
        ("TORCH_DIST_URL", "tcp://admin:p4ss@host:29500", "tcp://<redacted>@host:29500"),
        ("NCCL_NET_PLUGIN_URL", "https://u:tok@example.org/x@y", "https://<redacted>@example.org/x@y"),
        ("GIT_CREDENTIAL", "x", "<redacted>"),
        ("GIT_CREDENTIALS", "x", "<redacted>"),
        ("X_AUTH_HEADER", "x", "<redacted>"),
        ("SESSION_COOKIE", "x", "<redacted>"),
        ("HF_TOKEN", "x", "<redacted>"),
        ("AWS_SECRET_ACCESS_KEY", "x", "<redacted>"),
        ("TORCH_HEADER", "Bearer abcdefghijklmnop", "<redacted>"),
        ("TORCH_HUB", "hf_abcdefghijklmnopqrstuvwxyz", "<redacted>"),
    ],
)
def test_redaction_by_name_and_by_content(name, value, kept):
    assert redacted(name, value) == kept
    assert secret_name(name) == (value == "x")  # the ones redacted whole are those named as secrets


def test_captured_variables_never_carry_a_secret():
    env = {
        "NCCL_IB_PKEY": "0x8001",
        "TORCH_DIST_URL": "tcp://admin:p4ss@host",
        "NCCL_X_CREDENTIAL": "c",
        "HOME": "/root",
        "SLURM_JOB_ID": "7",
    }
    got = captured_variables(env)
    assert got == {
        "NCCL_IB_PKEY": "0x8001",
        "NCCL_X_CREDENTIAL": "<redacted>",
        "SLURM_JOB_ID": "7",
        "TORCH_DIST_URL": "tcp://<redacted>@host",
    }
    assert "p4ss" not in json.dumps(got)


@pytest.mark.slow
def test_a_passed_through_secret_reaches_the_job_and_no_file(tmp_path):
    """The job gets the secret from the environment bench runs in; plan.json, the commands and
    the results hold its name only."""
    secret = "s3cr3t-Value-9f8e7d"
    sweep = tmp_path / "s.yaml"
    sweep.write_text((SWEEPS / "local.yaml").read_text() + "env_passthrough: [NCCL_TEST_PASSWORD]\n")
    out = tmp_path / "run"
    bench(
        "sweep",
        str(sweep),
        "--executor",
        "local",
        "--out",
        str(out),
        "--max-nodes",
        "1",
        "--set",
        "gpus_per_node=[1]",
        "--set",
        "workloads.allreduce.max_bytes=64K",
        "--set",
        "workloads.synthetic=false",
        "--set",
        "workloads.real=false",
        env={"NCCL_TEST_PASSWORD": secret},
        timeout=600,
    )
    result = json.loads(next(out.glob("jobs/*/allreduce.json")).read_text())
    assert result["environment"]["variables"]["NCCL_TEST_PASSWORD"] == "<redacted>"  # it reached the rank
    plan = json.loads((out / "plan.json").read_text())
    assert plan["sweep"]["env_passthrough"] == ["NCCL_TEST_PASSWORD"]
    for f in out.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


# --------------------------------------------------------------------------- odd names and values that must work


@pytest.mark.slow
def test_labels_with_mathtext_are_drawn_as_text(real_run, tmp_path, capsys):
    """matplotlib parses `$...$` as mathtext and fails at draw time on `a$\\frac{x$`."""
    other = tmp_path / "b"
    shutil.copytree(real_run, other)
    plots, html = tmp_path / "plots", tmp_path / "r.html"
    labels = "a$\\frac{x$,b$_"
    assert main(["compare", str(real_run), str(other), "--labels", labels, "--plots", str(plots)]) == 0, (
        capsys.readouterr().err
    )
    assert sorted(p.name for p in plots.glob("*.png")) == ["compare_busbw.png", "compare_scaling.png"]
    assert main(["report", str(real_run), "--compare", str(other), "--labels", labels, "--out", str(html)]) == 0
    assert "a$\\frac{x$" in html.read_text()


@pytest.mark.slow
def test_junit_stays_xml_with_control_characters_in_names(real_run, tmp_path, capsys):
    """A run directory named with an escape sequence is valid UTF-8, so it is accepted; XML 1.0
    cannot hold the character even escaped, so junit.xml carries U+FFFD instead."""
    import xml.etree.ElementTree as ET

    night = tmp_path / "night\x1b[31m\x07"
    shutil.copytree(real_run, night)
    planned_later(night)  # a run of its own, not the baseline's copy
    db = str(tmp_path / "h.sqlite")
    assert main(["history", "add", str(real_run), "--create", "--cluster", "c", "--db", db]) == 0
    out = tmp_path / "regress"
    status = main(["regress", str(night), "--cluster", "c", "--db", db, "--baseline", "last", "--out", str(out)])
    assert status in (0, 1, 3), capsys.readouterr().err
    root = ET.parse(out / "junit.xml").getroot()
    assert "night\ufffd[31m\ufffd" in root.find("testsuite").get("name")


@pytest.mark.slow
def test_link_bytes_0_turns_the_probe_off(tmp_path):
    """The README's `link_bytes: 0`, which every job failed on: the workload runs, probe off."""
    out = tmp_path / "r.json"
    bench(
        "run",
        "allreduce",
        "--nproc",
        "2",
        "--device",
        "cpu",
        "-b",
        "1K",
        "-e",
        "4K",
        "-n",
        "2",
        "-w",
        "1",
        "--link-bytes",
        "0",
        "--json",
        str(out),
        timeout=300,
    )
    result = json.loads(out.read_text())
    assert result["params"]["link_bytes"] == 0 and result["rows"]
    assert "links_file" not in result and not (tmp_path / "r.links.json").exists()
