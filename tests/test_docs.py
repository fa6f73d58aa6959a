"""The reference pages held to the code (docs/reference/): the summary's columns, the sweep's
and the cluster profile's keys, and the exit statuses. Each check is tried on a page with a
planted omission too, so that it is seen to fail. The command-line page is written from the
parsers: tests/modules/harness/commands/test_manual.py."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path

import pytest
import yaml

from harness import errors
from harness.collect.summary import COLUMNS
from harness.config.cluster_profile import ClusterProfile, load_profile
from harness.config.spec import Sweep
from harness.config.sweepfile import load_sweep

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def _table_keys(text: str) -> list[str]:
    """The first column of a page's tables, where it is one `name` in backticks."""
    return re.findall(r"^\| `([^`]+)` \|", text, re.M)


def test_the_summary_page_describes_every_column_in_order():
    page = (REFERENCE / "summary.md").read_text()
    assert _table_keys(page) == COLUMNS
    assert all(row.rstrip(" |") for row in re.findall(r"^\| `[^`]+` \| \w+ \| (.+)$", page, re.M))


def test_the_column_check_finds_the_columns_a_page_leaves_out():
    """The ten columns the README's list once left out, planted as left out again."""
    ten = [
        "n_samples",
        "repeat",
        "settings",
        "settings_hash",
        "nic_bytes_ratio",
        "nic_check",
        "params",
        "compute_fraction",
        "step_data_wait_fraction",
        "breakdown_note",
    ]
    page = (REFERENCE / "summary.md").read_text()
    planted = "\n".join(line for line in page.splitlines() if not any(line.startswith(f"| `{c}` ") for c in ten))
    left_out = [c for c in COLUMNS if c not in _table_keys(planted)]
    assert sorted(left_out) == sorted(ten)


def _yaml_block(page: Path) -> str:
    return page.read_text().split("```yaml\n", 1)[1].split("```", 1)[0]


def _dataclass_of(tp: object) -> type | None:
    """The dataclass a field's type holds, alone, in a union with None, or as tuple[X, ...]."""
    if dataclasses.is_dataclass(tp):
        return tp  # type: ignore[return-value]
    if typing.get_origin(tp) in (typing.Union, types.UnionType, tuple):
        inner = [_dataclass_of(a) for a in typing.get_args(tp) if a is not type(None) and a is not Ellipsis]
        found = [c for c in inner if c is not None]
        return found[0] if len(found) == 1 else None
    return None


def _schema_keys(cls: type, prefix: str = "") -> set[str]:
    """Every key a file of the schema may hold, as dotted paths; a list of records is one path."""
    hints = typing.get_type_hints(cls)
    keys = set()
    for f in dataclasses.fields(cls):
        if f.metadata.get("derived"):
            continue
        keys.add(prefix + f.name)
        inner = _dataclass_of(hints[f.name])
        if inner is not None:
            keys |= _schema_keys(inner, f"{prefix}{f.name}.")
    return keys


def _written_keys(data: object, cls: type, prefix: str = "") -> set[str]:
    """The keys of a YAML document that the schema reads as its own (a settings set's or an
    environment's variables are names, not keys), as dotted paths."""
    hints = typing.get_type_hints(cls)
    keys = set()
    records = data if isinstance(data, list) else [data]
    for record in records:
        for key, value in (record or {}).items():
            keys.add(prefix + key)
            inner = _dataclass_of(hints[key]) if key in hints else None
            if inner is not None and isinstance(value, dict | list):
                keys |= _written_keys(value, inner, f"{prefix}{key}.")
    return keys


@pytest.mark.parametrize(
    ("page", "schema", "load"), [("sweep.md", Sweep, load_sweep), ("profile.md", ClusterProfile, load_profile)]
)
def test_a_reference_page_writes_every_key_of_its_schema(page, schema, load, tmp_path):
    """The page's YAML holds every key the schema reads and no other, and is a valid file."""
    text = _yaml_block(REFERENCE / page)
    written, known = _written_keys(yaml.safe_load(text), schema), _schema_keys(schema)
    assert written == known, f"docs/reference/{page}: not written {known - written}, unknown {written - known}"
    (tmp_path / "page.yaml").write_text(text)
    load(tmp_path / "page.yaml")
    planted = yaml.safe_load(text)
    planted.pop(sorted(planted)[0])
    assert _written_keys(planted, schema) != known  # the check sees a key left out


def test_the_shipped_example_profile_states_keys_of_the_schema():
    example = yaml.safe_load((ROOT / "sweeps" / "clusters" / "example.yaml").read_text())
    assert _written_keys(example, ClusterProfile) <= _schema_keys(ClusterProfile)


def test_the_exit_status_page_names_every_status_bench_gives():
    page = (REFERENCE / "exit-status.md").read_text()
    written = [int(s) for s in re.findall(r"^\| (\d+) \|", page, re.M)]
    given = sorted({0, *(v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int))})
    assert sorted(written) == given


def test_every_page_the_code_and_the_docs_cite_exists():
    """A `docs/...md` named in a comment, a message or a page is a page of docs/: a page moved
    or renamed leaves no citation behind."""
    cited: dict[str, set[str]] = {}
    sources = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")]
    for folder in ("harness", "benchmarks", "tests", "recipes", "sweeps", ".ci"):
        sources += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".sh", ".yaml", "")]
    for path in sources:
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for page in re.findall(r"(?<![\w/])docs/[\w/.-]*\w\.md", text):
            cited.setdefault(page, set()).add(path.relative_to(ROOT).as_posix())
    assert len(cited) > 15
    missing = {page: sorted(where) for page, where in cited.items() if not (ROOT / page).is_file()}
    assert missing == {}


def test_the_readme_s_index_lists_every_page():
    """The README's "Documentation" section names every page under docs/, and no other."""
    readme = (ROOT / "README.md").read_text()
    index = readme.split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- (docs/[\w/.-]+\.md):", index, re.M)
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(listed) == pages and len(set(listed)) == len(listed)


def test_the_readme_s_command_table_has_every_command():
    from harness.commands import GROUPS

    readme = (ROOT / "README.md").read_text()
    table = readme.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    cells = re.findall(r"^\| (.+?) \| ", table, re.M)[1:]  # each row's first cell, past the heading
    named = {
        re.match(r"(?:bench )?([a-z]+)", span).group(1) for cell in cells for span in re.findall(r"`([^`]+)`", cell)
    }
    assert named == {c for commands in GROUPS.values() for c in commands}
