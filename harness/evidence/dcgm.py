"""NVIDIA DCGM's own diagnostic of a node's GPUs (`bench nodes --dcgm LEVEL`, docs/concepts/faults.md,
"DCGM's diagnostic"): each node runs `dcgmi diag -r LEVEL -j` in a step of the check, its output
is kept as it was printed, and read here. DCGM has printed two JSON documents:

- 3.x: `{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"gpu_ids", "status", "warnings"}]}, null, ...]}], "version"}}`, `gpu_ids` a GPU's index or
  a comma-separated list of them, `status` upper case (`PASS`), and text before the document
  (NVIDIA/DCGM's test "JsonResult: Deserialize real output", DCGM 3.1.0; tests/fixtures/dcgm/);
- 4.x: `{"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"entity_group", "entity_group_id", "entity_id", "status", "warnings": [{"warning",
  "error_id", "error_category", "error_severity"}]}], "test_summary": {"status"}}]}],
  "runtime_error"}, "entity_groups", "metadata": {"version"}}`, `status` capitalised (`Pass`)
  (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json, DCGM 4.6.0).

A test that failed on a GPU names the node, the test and the GPU with DCGM's words; what the
diagnostic could not tell (no dcgmi on the node, a run cut short, a runtime error, every test
skipped) is said and never taken for a pass.

Only the standard library: each node of a check runs it (harness/evidence/telemetry.py).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.evidence.faults import host_name
from harness.files import inside

FOLDER = "dcgm"  # in a check's folder: <host>.json, each node's run of the diagnostic
RECORD_VERSION = 1
OUTPUT_LIMIT = 1 << 22  # bytes of dcgmi's output kept: hundreds of tests on 8 GPUs fit many times
# How long a level may run before it is ended. Levels 1 and 2 are meant as readiness checks and
# epilogues, 3 and 4 as an administrator's post-mortems (DCGM user guide, "DCGM Diagnostic Goals");
# these are bench's bounds around them, which the check's Slurm time limit adds.
TIMEOUT_S = {1: 600.0, 2: 1800.0, 3: 7200.0, 4: 14400.0}
LEVELS = tuple(TIMEOUT_S)


def run_here(folder: Path, level: int) -> Path:
    """Run the diagnostic on this node and keep what it printed in FOLDER/<host>.json (FOLDER
    made in its parent, a run directory's): its exit status (None when it was ended at the
    level's timeout), its output, and whether dcgmi was there at all."""
    record: dict[str, Any] = {"version": RECORD_VERSION, "level": level, "missing": False}
    try:
        done = subprocess.run(
            ["dcgmi", "diag", "-r", str(level), "-j"], capture_output=True, timeout=TIMEOUT_S[level], check=False
        )
        record |= {"returncode": done.returncode, "stdout": _text(done.stdout), "stderr": _text(done.stderr)}
    except FileNotFoundError:
        record |= {"missing": True, "returncode": None, "stdout": "", "stderr": ""}
    except subprocess.TimeoutExpired as exc:
        record |= {"returncode": None, "stdout": _text(exc.stdout or b""), "stderr": _text(exc.stderr or b"")}
    return inside.write(folder.parent, f"{folder.name}/{host_name()}.json", json.dumps(record).encode())


def _text(data: bytes) -> str:
    return data[:OUTPUT_LIMIT].decode("utf-8", "replace")


@dataclass
class Result:
    """One test's result on one GPU (or the GPUs it stands for), as DCGM printed it."""

    category: str
    test: str
    entity: str  # "GPU 3", or "GPUs 0,1,2,3" where one result stands for several
    status: str  # lower case: pass, fail, warn, skip, or what DCGM printed
    warnings: list[str]


def parse(text: str) -> tuple[str | None, list[Result], str | None]:
    """(DCGM's version, each result, its runtime error) of a `dcgmi diag -j` output, 3.x's or
    4.x's document (text before it is skipped, as dcgmi may print a warning first). ValueError
    says why the text is not such a document."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON document")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    root = doc.get("DCGM Diagnostic", doc.get("DCGM GPU Diagnostic")) if isinstance(doc, dict) else None
    if not isinstance(root, dict):
        raise ValueError('no "DCGM Diagnostic" (4.x) or "DCGM GPU Diagnostic" (3.x) object')
    metadata = doc.get("metadata")
    version = root.get("version") or (metadata.get("version") if isinstance(metadata, dict) else None)
    error = root.get("runtime_error")
    results = []
    for category in _list(root.get("test_categories"), "test_categories"):
        for test in _list(category.get("tests"), "tests") if isinstance(category, dict) else ():
            if not isinstance(test, dict):  # 3.x lists null between its tests
                continue
            for r in _list(test.get("results"), "results"):
                if isinstance(r, dict):
                    results.append(_result(str(category.get("category", "")), str(test.get("name", "")), r))
    return (str(version) if version else None), results, (str(error) if error else None)


def _list(value: object, key: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{key} is not a list")
    return value


def _result(category: str, test: str, r: dict[str, Any]) -> Result:
    if "entity_id" in r:  # 4.x: an entity of a group (GPU, CPU, NvSwitch, ...)
        entity = f"{r.get('entity_group', 'entity')} {r['entity_id']}"
    else:  # 3.x: a GPU's index, or the GPUs a result stands for
        ids = str(r.get("gpu_ids", "?"))
        entity = f"GPUs {ids}" if "," in ids else f"GPU {ids}"
    warnings = [str(w.get("warning", w)) if isinstance(w, dict) else str(w) for w in r.get("warnings") or ()]
    return Result(category, test, entity, str(r.get("status", "")).strip().lower(), warnings)


@dataclass
class Diagnosis:
    """What one node's run of the diagnostic says: the GPUs and tests it names, what it could not
    tell, and what it warned of."""

    host: str
    named: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # its warnings: said, not failed


def judge(host: str, record: dict[str, Any]) -> Diagnosis:
    """A node's run (as run_here keeps it) judged: every failed result named; a run that did not
    happen, did not end, cannot be read, stopped at a runtime error or passed no test at all is
    not judged; a warning is said."""
    found = Diagnosis(host)
    level = record.get("level")
    what = f"dcgmi diag -r {level}"
    if record.get("missing"):
        found.unjudged.append("dcgmi is not on the node (its PATH): DCGM's diagnostic did not run")
        return found
    if record.get("returncode") is None:
        found.unjudged.append(f"{what} did not end within {TIMEOUT_S.get(int(level or 0), 0):g} s and was ended")
        return found
    try:
        version, results, error = parse(str(record.get("stdout", "")))
    except ValueError as exc:
        said = str(record.get("stderr", "")).strip().splitlines()
        found.unjudged.append(
            f"{what} exited {record['returncode']} without DCGM's JSON ({exc})" + (f": {said[0][:160]}" if said else "")
        )
        return found
    if error:
        found.unjudged.append(f"{what} stopped: {error[:200]}")
    for r in results:
        words = "; ".join(r.warnings)[:300]
        if r.status == "fail":
            found.named.append(f"{what}: {r.test} failed on {r.entity}" + (f": {words}" if words else ""))
        elif r.status == "warn":
            found.unread.append(f"{what}: {r.test} warned on {r.entity}" + (f": {words}" if words else ""))
    if not error and not any(r.status == "pass" for r in results):
        found.unjudged.append(f"{what} passed no test (DCGM {version or '?'}): every test skipped or not run")
    if record["returncode"] != 0 and not found.named and not found.unjudged:
        found.unjudged.append(f"{what} exited {record['returncode']} though no test of its output failed")
    return found


def read_check(folder: Path, names: list[str]) -> list[Diagnosis]:
    """Each node's run of the diagnostic in FOLDER/<host>.json, judged; a node without one, or
    with one that cannot be read, is not judged, and says why."""
    out = []
    for host in names:
        path = folder / f"{host}.json"
        try:
            with open(path, "rb") as f:
                record = json.loads(f.read(2 * OUTPUT_LIMIT + 4096))
        except FileNotFoundError:
            out.append(Diagnosis(host, unjudged=["no run of DCGM's diagnostic was kept"]))
            continue
        except (OSError, ValueError) as exc:
            out.append(Diagnosis(host, unjudged=[f"its run of DCGM's diagnostic cannot be read ({str(exc)[:120]})"]))
            continue
        if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
            out.append(Diagnosis(host, unjudged=[f"{path}: not a run of DCGM's diagnostic"]))
            continue
        out.append(judge(host, record))
    return out
