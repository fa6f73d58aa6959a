"""The codebase's shape, held by tests where no tool holds it: executors are told apart by
their classes, never by their names, outside harness/executors/ (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

from harness import executors

HARNESS = ROOT / "harness"


def _name_tests(path: Path, root: Path = ROOT) -> list[str]:
    """Each comparison in `path` of a value with an executor's name (==, !=, in, not in, a
    match case), as 'file:line: source'."""
    names = set(executors.NAMES)
    tree = ast.parse(path.read_text(), str(path))

    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            hit = any(named(n) for n in (node.left, *node.comparators))
        elif isinstance(node, ast.MatchValue):
            hit = named(node.value)
        else:
            continue
        if hit:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.get_source_segment(path.read_text(), node)}")
    return found


def test_no_executor_is_told_apart_by_its_name_outside_executors():
    outside = [p for p in sorted(HARNESS.rglob("*.py")) if HARNESS / "executors" not in p.parents]
    assert len(outside) >= 40
    found = [hit for path in outside for hit in _name_tests(path)]
    assert found == [], "ask the executor's class (harness/executors/base.py), not its name:\n" + "\n".join(found)


def test_the_name_test_finds_what_it_looks_for(tmp_path):
    """The check above reads every form a name test takes."""
    (tmp_path / "x.py").write_text(
        'if kind == "local":\n    pass\n'
        'batch = name in ("slurm", "submitit")\n'
        'match name:\n    case "submitit":\n        pass\n'
        'ok = name == "localhost"\n'
    )
    hits = _name_tests(tmp_path / "x.py", tmp_path)
    assert [h.split(":")[1] for h in hits] == ["1", "3", "5"]


def _listed(doc: str, heading: str) -> set[str]:
    """The modules a table of docs/architecture.md under `heading` lists (its first column)."""
    section = doc.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([\w/]+\.py)` \|", section, re.M))


def _modules(package: str) -> set[str]:
    """The package's modules, but the __init__.py files that hold no code."""
    root = ROOT / package
    found = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        if path.name != "__init__.py" or body:
            found.add(path.relative_to(root).as_posix())
    return found


def test_the_architecture_lists_every_module():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for package, heading in (("harness", "harness/"), ("benchmarks", "benchmarks/")):
        listed, tree = _listed(doc, heading), _modules(package)
        assert len(tree) > 10
        assert listed == tree, f"docs/architecture.md, {package}/: not listed {tree - listed}, gone {listed - tree}"


LONG = 600  # lines past which a module must say why it is one file


def test_a_module_past_600_lines_says_why_it_is_one_file():
    """A module grows past LONG lines only with a paragraph of its docstring that begins "One
    file:" and says why its parts cannot live apart (CONTRIBUTING.md, "Where a change goes")."""
    paths = sorted([*(ROOT / "harness").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])
    assert len(paths) > 60
    silent = []
    for path in paths:
        text = path.read_text()
        if text.count("\n") > LONG and "\n\nOne file: " not in (ast.get_docstring(ast.parse(text)) or ""):
            silent.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert silent == []
