"""What a series is (harness/analysis/series.py, docs/guides/fleet.md): the stack a run ran on, a new
series where it changes, baselines from the run's own series, and `history list` saying why."""

from __future__ import annotations

import json

from conftest import bench, copy_run, planned_later

from harness.analysis import series


def test_a_stack_is_the_documented_fields_and_differences_name_them():
    env = {"torch": ["2.3.1"], "nccl": ["2.21.5"], "gpu": ["NVIDIA H100 80GB HBM3"], "hosts": ["a", "b"]}
    profile = {"name": "lab", "account": "x", "hardware": {"nics_per_node": 8}, "container": {
        "engine": "pyxis", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "mounts": ["/a:/b"]}}  # fmt: skip
    stack = series.of(env, profile)
    assert set(stack) == {*series.ENVIRONMENT_FIELDS, *(f"profile.{f}" for f in series.PROFILE_FIELDS)}
    assert stack["torch"] == ["2.3.1"] and stack["python"] == [] and stack["profile.partition"] is None
    assert stack["profile.container"] == {"engine": "pyxis", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}
    # hosts, the account and mounts do not make another series; the image and torch do
    other = series.of({**env, "hosts": ["c"]}, {**profile, "account": "y", "container": {
        "engine": "pyxis", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "mounts": []}})  # fmt: skip
    assert series.same(stack, other) and series.digest(stack) == series.digest(other)
    newer = series.of({**env, "torch": ["2.4.0"]}, {**profile, "container": {"image": "pytorch:24.07"}})
    assert series.differences(stack, newer) == [
        "torch 2.3.1 -> 2.4.0",
        'profile.container {"engine":"pyxis","image":"nvcr.io/nvidia/pytorch:24.05-py3"} -> '
        '{"engine":null,"image":"pytorch:24.07"}',
    ]
    # a run added before stacks were recorded: its environment's fields, no profile's
    legacy = series.recorded(None, json.dumps(env))
    assert legacy["torch"] == ["2.3.1"] and "profile.hardware" not in legacy
    assert series.same(legacy, stack) and not series.same(legacy, newer)
    assert series.recorded("not json", None) == {} and series.recorded(None, "[1]") == {}


def _with_torch(run, dst, version):
    """A copy of a run whose ranks reported another torch, collected again."""
    copy_run(run, dst)
    planned_later(dst, "1")
    for path in dst.glob("jobs/*/*.json"):
        data = json.loads(path.read_text())
        if "environment" in data:
            data["environment"]["torch"] = version
            path.write_text(json.dumps(data))
    bench("collect", str(dst))
    return dst


def test_a_new_stack_starts_a_new_series(real_run, tmp_path, history_at):
    """Three nights on one torch, then one on another: the fourth is shown against the three
    but not judged (exit 3, naming the field), unless --across-series; added, it is its series'
    first baseline, and `history list` shows where the series starts and why."""
    nights = [planned_later(copy_run(real_run, tmp_path / f"n{i}"), f"0{i}") for i in range(3)]
    for night in nights:
        bench("history", "add", str(night), "--create", "--cluster", "lab", "--db", history_at)
    upgraded = _with_torch(real_run, tmp_path / "upgraded", "9.9.9")
    r = bench("regress", "--must-catch", "100%", str(upgraded), "--cluster", "lab", "--db", history_at, check=False)
    assert r.returncode == 3 and "CANNOT JUDGE" in r.stderr, r.describe()
    said = " ".join(r.stdout.split())
    assert "this run starts a new series of cluster lab (stack " in said and " -> 9.9.9" in said, said
    assert "torch " in said and "not judged" in said
    verdict = json.loads((upgraded / "regress" / "gate.json").read_text())
    assert verdict["verdict"] == "cannot judge" and verdict["rejected"] == []
    assert set(verdict["bands"]["verdict"]) == {"cannot judge"}
    assert "a new series: torch " in (upgraded / "regress" / "report.md").read_text()
    across = bench("regress", "--must-catch", "100%", str(upgraded), "--cluster", "lab", "--db", history_at,
                   "--out", str(tmp_path / "a"), "--across-series", check=False)  # fmt: skip
    assert across.returncode == 0 and "new series" not in across.stdout, across.describe()
    # the same night on the old stack is judged against its series as before
    same = planned_later(copy_run(real_run, tmp_path / "same"), "1")
    r = bench(
        "regress",
        "--must-catch",
        "100%",
        str(same),
        "--cluster",
        "lab",
        "--db",
        history_at,
        "--out",
        str(tmp_path / "s"),
        check=False,
    )
    assert r.returncode == 0 and "new series" not in r.stdout, r.describe()
    bench("history", "add", str(upgraded), "--create", "--cluster", "lab", "--db", history_at)
    listed = bench("history", "list", "--cluster", "lab", "--db", history_at).stdout
    flat = " ".join(listed.split())
    assert "run 4 of cluster lab starts a new series (stack " in flat and "-> 9.9.9" in flat, listed
    assert flat.count("starts a new series") == 1 and "runs before it are not its baseline" in flat, listed
    # the new series judges its own runs: the next night's baseline is run 4 alone
    later = planned_later(_with_torch(real_run, tmp_path / "later", "9.9.9"), "2")
    r = bench(
        "regress",
        "--must-catch",
        "100%",
        str(later),
        "--cluster",
        "lab",
        "--db",
        history_at,
        "--out",
        str(tmp_path / "l"),
        check=False,
    )
    assert r.returncode in (0, 3) and "new series" not in r.stdout, r.describe()
    assert "history run 4 (" in (tmp_path / "l" / "report.md").read_text()


def test_an_acceptance_moves_its_own_series_alone(real_run, tmp_path, history_at):
    """Three nights on one torch (runs 1-3), then one on another (run 4, a series of its own),
    accepted. A night of the first series is still judged against its three nights, not refused
    as though run 4 had cut them off; once run 3 is accepted, against run 3 alone."""
    nights = [planned_later(copy_run(real_run, tmp_path / f"n{i}"), f"0{i}") for i in range(3)]
    for night in nights:
        bench("history", "add", str(night), "--create", "--cluster", "lab", "--db", history_at)
    upgraded = _with_torch(real_run, tmp_path / "upgraded", "9.9.9")
    bench("history", "add", str(upgraded), "--create", "--cluster", "lab", "--db", history_at)
    bench("history", "accept", "4", "--reason", "the new torch's level", "--db", history_at)
    tonight = planned_later(copy_run(real_run, tmp_path / "tonight"), "2")

    def judged(out: str) -> str:
        r = bench("regress", "--must-catch", "100%", str(tonight), "--cluster", "lab", "--db", history_at,
                  "--out", str(tmp_path / out), check=False)  # fmt: skip
        assert r.returncode == 0, r.describe()
        return (tmp_path / out / "report.md").read_text()

    assert "(history runs 1, 2, 3)" in judged("a")
    bench("history", "accept", "3", "--reason", "new firmware", "--db", history_at)
    assert "(history run 3 (" in judged("b")
