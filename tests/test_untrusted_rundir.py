"""A run directory is data, not instructions (docs/concepts/hardening.md, "Files"): links, FIFOs and
devices planted in one never make bench write, remove or wait outside it.

Each case copies a real run, plants something in the copy, and runs bench's real `main` on it
in this process under an alarm, so a read that waits forever fails the case rather than the
suite. Every case checks the exit status, one line on stderr for a refusal (a warning naming the
planted file otherwise), no traceback, and that nothing in the directory outside the run, which
the planted links point into, changed."""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import snapshot

from benchmarks.results import LINE_LIMIT, bounded_lines
from harness.cli import main
from harness.errors import RunDirError
from harness.evidence import transport
from harness.files import inside

ALARM_S = 60


class Planted:
    """One hostile run directory: `plant(run, outside)` edits the copy `run` (links may point
    into `outside`) and returns bench's arguments. `status` is the exit status; `words` must be
    in the error line (status 2) or in a warning line (status 0)."""

    def __init__(self, name: str, plant: Callable[[Path, Path], list[str]], status: int, *words: str):
        self.name, self.plant, self.status, self.words = name, plant, status, words


def _link(path: Path, target: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.symlink_to(target)


def _a_job(run: Path) -> str:
    return json.loads((run / "plan.json").read_text())["jobs"][0]["name"]


def _result(run: Path) -> Path:
    return next((run / "jobs").glob("*/allreduce*.json"))


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _report_html(run: Path, outside: Path) -> list[str]:
    _link(run / "report.html", outside / "passwd")
    return ["report", str(run)]


def _summary_generations(run: Path, outside: Path) -> list[str]:
    # .summary made a link to a directory that looks like bench's generations: collect wrote a
    # generation there and "cleaned" every other entry of it.
    (outside / "current").symlink_to("kept")
    (outside / "kept").mkdir()
    _link(run / ".summary", outside)
    return ["collect", str(run)]


def _regress_dir(run: Path, outside: Path) -> list[str]:
    db = str(outside.parent / "history.sqlite")
    assert main(["history", "add", str(run), "--create", "--cluster", "c", "--db", db]) == 0
    plan = json.loads((run / "plan.json").read_text())
    (run / "plan.json").write_text(json.dumps({**plan, "created": "2026-01-01T00:00:00+00:00"}))  # another run
    _link(run / "regress", outside)
    return ["regress", str(run), "--cluster", "c", "--db", db, "--baseline", "last"]


def _plots_dir(run: Path, outside: Path) -> list[str]:
    _link(run / "plots", outside)
    return ["plot", str(run)]


def _progress_dir(run: Path, outside: Path) -> list[str]:
    # A resumed job's stale files are removed first; through this link they were the outside's.
    job = _a_job(run)
    table = json.loads((run / "jobs.json").read_text())
    table["jobs"][job]["state"] = "FAILED"
    (run / "jobs.json").write_text(json.dumps(table))
    (outside / "allreduce.rank0.json").write_text("{}")  # a name the resumed job clears
    _link(run / "jobs" / job / "progress", outside)
    return ["sweep", "--resume", str(run)]


def _job_dir(run: Path, outside: Path) -> list[str]:
    job = _a_job(run)
    table = json.loads((run / "jobs.json").read_text())
    table["jobs"][job]["state"] = "FAILED"
    (run / "jobs.json").write_text(json.dumps(table))
    _link(run / "jobs" / job, outside)
    return ["sweep", "--resume", str(run)]


def _job_log(run: Path, outside: Path) -> list[str]:
    # The resumed job's log was opened with a plain open(..., "ab"): appended to the outside's file.
    job = _a_job(run)
    table = json.loads((run / "jobs.json").read_text())
    table["jobs"][job]["state"] = "FAILED"
    (run / "jobs.json").write_text(json.dumps(table))
    _link(run / "jobs" / job / "log.txt", outside / "passwd")
    return ["sweep", "--resume", str(run)]


def _fifo_plan(run: Path, outside: Path) -> list[str]:
    _fifo(run / "plan.json")
    return ["status", str(run)]


def _fifo_table(run: Path, outside: Path) -> list[str]:
    _fifo(run / "jobs.json")
    return ["status", str(run)]


def _fifo_lock(run: Path, outside: Path) -> list[str]:
    (run / ".lock").unlink(missing_ok=True)
    os.mkfifo(run / ".lock")
    return ["collect", str(run)]


def _fifo_summary(run: Path, outside: Path) -> list[str]:
    current = run / ".summary" / os.readlink(run / ".summary" / "current") / "summary.parquet"
    _fifo(current)
    return ["report", str(run), "--out", str(outside.parent / "report.html")]


def _fifo_result(run: Path, outside: Path) -> list[str]:
    _fifo(_result(run))
    return ["collect", str(run)]


def _device_result(run: Path, outside: Path) -> list[str]:
    _link(_result(run), Path("/dev/zero"))
    return ["collect", str(run)]


def _fifo_telemetry(run: Path, outside: Path) -> list[str]:
    folder = run / "jobs" / _a_job(run) / "telemetry"
    folder.mkdir(exist_ok=True)
    for f in folder.glob("*.samples.jsonl"):
        f.unlink()
    os.mkfifo(folder / "node.samples.jsonl")
    return ["collect", str(run)]


CASES = [
    Planted("report-html-link", _report_html, 0),
    Planted("collect-generations-link", _summary_generations, 0),
    Planted("regress-dir-link", _regress_dir, 2, "regress", "a symbolic link"),
    Planted("plot-dir-link", _plots_dir, 2, "plots", "a symbolic link"),
    Planted("resume-progress-link", _progress_dir, 2, "progress", "a symbolic link"),
    Planted("resume-job-dir-link", _job_dir, 2, "jobs/", "a symbolic link"),
    Planted("resume-log-link", _job_log, 2, "log.txt", "a symbolic link"),
    Planted("status-plan-fifo", _fifo_plan, 2, "plan.json", "a FIFO"),
    Planted("status-table-fifo", _fifo_table, 2, "jobs.json", "a FIFO"),
    Planted("collect-lock-fifo", _fifo_lock, 2, ".lock", "a FIFO"),
    Planted("report-summary-fifo", _fifo_summary, 2, "summary.parquet", "a FIFO"),
    Planted("collect-result-fifo", _fifo_result, 0, "allreduce", "a FIFO"),
    Planted("collect-result-device", _device_result, 0, "allreduce", "a character device"),
    Planted("collect-telemetry-fifo", _fifo_telemetry, 0, "node.samples.jsonl", "a FIFO"),
]


def _alarm(signum, frame):
    raise TimeoutError(f"bench waited over {ALARM_S} s: it read something that never ends")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_planted_file_moves_nothing_outside_the_run(case, real_run, tmp_path, capsys, monkeypatch):
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(real_run, run, symlinks=True)
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0\n")
    (outside / "precious").mkdir()
    (outside / "precious" / "data").write_text("keep me\n")
    argv = case.plant(run, outside)
    before = snapshot(outside)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM_S)
    try:
        status = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert status == case.status, f"exit {status}\nstdout: {out}\nstderr: {err}"
    assert snapshot(outside) == before, "bench changed a file outside the run directory"
    lines = err.strip().splitlines()
    if case.status == 2:
        assert len(lines) == 1 and lines[0].startswith(f"bench {argv[0]}: error: "), err
        assert all(w in lines[0] for w in case.words), lines[0]
    elif case.words:
        assert any(all(w in line for w in case.words) for line in lines), err
    if case.name == "report-html-link":
        assert (run / "report.html").is_file() and not (run / "report.html").is_symlink()
        assert (run / "report.html").read_bytes().startswith(b"<!DOCTYPE html>")


def test_writes_and_removals_stay_inside_whatever_the_links(tmp_path):
    """harness/files/inside.py on its own: a file written over a link replaces the link; a directory
    removed with a link to the outside in it loses the link, and the outside keeps its files."""
    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    outside.mkdir()
    (outside / "f").write_text("outside\n")
    (run / "r.txt").symlink_to(outside / "f")
    inside.write(run, "r.txt", b"inside\n")
    assert (outside / "f").read_text() == "outside\n" and (run / "r.txt").read_text() == "inside\n"
    assert not (run / "r.txt").is_symlink()

    (run / "gens" / "g1").mkdir(parents=True)
    (run / "gens" / "g1" / "out").symlink_to(outside)
    (run / "gens" / "g1" / "deep").mkdir()
    (run / "gens" / "g1" / "deep" / "f").symlink_to(outside / "f")
    assert inside.remove(run, "gens/g1") and not (run / "gens" / "g1").exists()
    assert (outside / "f").read_text() == "outside\n"

    (run / "d").symlink_to(outside)
    for act in (
        lambda: inside.write(run, "d/x", b""),
        lambda: inside.remove(run, "d/f"),
        lambda: inside.mkdir(run, "d/e"),
    ):
        with pytest.raises(RunDirError, match="a symbolic link where bench keeps a directory"):
            act()
    assert sorted(p.name for p in outside.iterdir()) == ["f"]


def test_lines_are_cut_at_the_bound_and_the_next_line_is_read(tmp_path):
    """A line past LINE_LIMIT is cut, not read whole, and the lines after it are still parsed."""
    log = tmp_path / "nccl.log"
    real = "node1:42:42 [0] NCCL INFO Using network IB\n"
    log.write_bytes(b"a" * (3 * LINE_LIMIT + 5) + b"\n" + real.encode() + b"x" * 10)
    with open(log, "rb") as f:
        lines = list(bounded_lines(f, chunk=4096))
    assert [len(x) for x in lines] == [LINE_LIMIT, len(real) - 1, 10]
    assert transport.read_log(log)["net"] == "IB"


def test_a_job_table_s_text_is_shown_never_obeyed(real_run, tmp_path, capsys):
    """jobs.json is data: a reason or a log tail holding an escape sequence or rich markup is
    printed with the control characters escaped and the markup as text."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run, symlinks=True)
    table = json.loads((run / "jobs.json").read_text())
    job = _a_job(run)
    table["jobs"][job].update(
        state="FAILED",
        job_id="[bold]7[/bold]",
        reason="[red]boom[/red]\x1b[2J",
        log_tail="line one\n\x1b]0;owned\x07[link=http://x]y[/link]",
    )
    (run / "jobs.json").write_text(json.dumps(table))
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "[red]boom[/red]\\x1b[2J" in out and "\\x1b]0;owned\\x07[link=http://x]y[/link]" in out
    assert "[bold]7[/bold]" in out.replace("\n", "").replace("│", "").replace(" ", "")
