"""The codebase's shape, held by tests where no tool holds it: executors are told apart by
their classes, never by their names, outside harness/executors/ (docs/concepts/architecture.md)."""

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
    """The modules a table of docs/concepts/architecture.md under `heading` lists (its first column)."""
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
    doc = (ROOT / "docs" / "concepts" / "architecture.md").read_text()
    for package, heading in (("harness", "harness/"), ("benchmarks", "benchmarks/")):
        listed, tree = _listed(doc, heading), _modules(package)
        assert len(tree) > 10
        assert listed == tree, (
            f"docs/concepts/architecture.md, {package}/: not listed {tree - listed}, gone {listed - tree}"
        )


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


def _tests_table() -> dict[str, list[str]]:
    """Module -> its test files, from the table of CONTRIBUTING.md, "Where the tests are"."""
    doc = (ROOT / "CONTRIBUTING.md").read_text()
    section = doc.split("## Where the tests are", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (`[\w/.]+\.py`|\(across modules\)) \| (.+) \|$", section, re.M)
    assert len(rows) == section.count("\n| ") - 2, "a row of the table is not `| module | files |`"
    return {module.strip("`"): re.findall(r"`([\w/.]+\.py)`", files) for module, files in rows}


def test_every_module_s_tests_are_found_from_its_name():
    """tests/modules/ mirrors the source tree (CONTRIBUTING.md, "Where the tests are"): a
    module's tests are in tests/modules/<its path>/test_<its name>.py, or the table says where.
    Every file the table names exists, and every file under tests/modules/ is a module's or in
    the table."""
    table = _tests_table()
    modules = {f"{package}/{m}" for package in ("harness", "benchmarks") for m in _modules(package)}
    assert len(table) > 30 and len(modules) > 60

    def own(module: str) -> Path:
        path = Path(module)
        return ROOT / "tests" / "modules" / path.parent / f"test_{path.name}"

    unplaced = sorted(m for m in modules if not own(m).is_file() and m not in table)
    assert unplaced == [], f"give these a test file, or a row in CONTRIBUTING.md's table: {unplaced}"
    gone = sorted(m for m in table if m != "(across modules)" and m not in modules)
    named = {f for files in table.values() for f in files}
    missing = sorted(f for f in named if not (ROOT / "tests" / f).is_file())
    assert gone == [] and missing == [], f"the table names modules {gone} and test files {missing} that do not exist"
    owned = {own(m) for m in modules}
    stray = sorted(
        p.relative_to(ROOT / "tests").as_posix()
        for p in (ROOT / "tests" / "modules").rglob("test_*.py")
        if p not in owned and p.relative_to(ROOT / "tests").as_posix() not in named
    )
    assert stray == [], f"test files under tests/modules/ that are no module's and not in the table: {stray}"


def test_no_test_folder_can_hide_a_package():
    """A test folder named as a top-level package, on the path pytest gives its test files,
    would be imported in the package's place when the package is found only through its
    editable finder (which comes after the path); and two test files of one name collide under
    pytest's default import mode."""
    tests = ROOT / "tests"
    folders = {p.parent for p in tests.rglob("test_*.py")} | {tests}
    hidden = sorted(
        f"{f.relative_to(ROOT)}/{name}" for f in folders for name in ("harness", "benchmarks") if (f / name).is_dir()
    )
    assert hidden == []
    names = [p.name for p in tests.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_every_test_file_the_text_names_exists():
    """A path of a test file in the docs, the code or the tests' own words is a real file."""
    pattern = re.compile(r"tests/[\w/]*test_\w+\.py")
    sources = [
        *(ROOT / "docs").rglob("*.md"),
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        *(ROOT / "harness").rglob("*.py"),
        *(ROOT / "harness" / "sweeps").rglob("*.yaml"),
        *(ROOT / "benchmarks").rglob("*.py"),
        *(p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_ci.py"),  # test_ci builds a tree of its own
    ]
    assert len(sources) > 100
    missing = sorted(
        f"{path.relative_to(ROOT)}: {cited}"
        for path in sources
        for cited in set(pattern.findall(path.read_text()))
        if not (ROOT / cited).is_file()
    )
    assert missing == []


# The paths job scripts name, each a few lines that run the module of the same name in its package
# (docs/concepts/architecture.md, "Paths job scripts name").
JOB_PATHS = {"harness/telemetry.py", "harness/hangs.py", "harness/inside.py", "harness/nodesteps.py"}


def _names(paths: list[str]) -> list[str]:
    """The module names that more than one of `paths` has."""
    names = [Path(p).stem for p in paths]
    return sorted({n for n in names if names.count(n) > 1})


def test_no_two_modules_share_a_name():
    """A name says what a module holds, so it is one module's (CONTRIBUTING.md, "A module"): but
    for the paths job scripts name, which run the module they are named after."""
    modules = [
        f"{package}/{m}"
        for package in ("harness", "benchmarks")
        for m in _modules(package)
        if not m.endswith("__init__.py")
    ]
    assert len(modules) > 90
    assert _names([m for m in modules if m not in JOB_PATHS]) == []
    assert all(m in modules for m in JOB_PATHS)
    assert _names(modules) == ["hangs", "inside", "telemetry"]  # the check sees a shared name


def test_harness_s_top_holds_the_command_flows_and_the_packages():
    top = sorted(p.name for p in HARNESS.glob("*.py"))
    assert top == sorted(
        [
            "__init__.py",
            "cli.py",
            "errors.py",
            "sweep.py",
            "check_nodes.py",
            "accept.py",
            *(Path(p).name for p in JOB_PATHS),
        ]
    )
    packages = sorted(p.parent.name for p in HARNESS.glob("*/__init__.py"))
    assert packages == [
        "analysis",
        "collect",
        "commands",
        "config",
        "evidence",
        "executors",
        "files",
        "nodes",
        "present",
        "run",
    ]
    for package in packages:
        doc = ast.get_docstring(ast.parse((HARNESS / package / "__init__.py").read_text()))
        assert doc and len(doc.split()) >= 20, f"harness/{package}/__init__.py: say what lives there"
