"""Bench's YAML files (sweep files, cluster profiles) in, checked frozen dataclasses out: the
loader, held to a size, a depth and a count of values; the conversion of a mapping into a
dataclass (`build`), which names the key of any error; and the checks of fields both kinds of
file share: times, one-line text, environment variables and secrets. harness/config/spec.py holds the
sweep's schema and harness/config/cluster_profile.py the profile's.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import looks_secret, parse_size, secret_name
from harness.errors import SpecError

MAX_MINUTES = 366 * 24 * 60  # Slurm's time limit, at most a year
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FieldError(ValueError):
    """Raised by a dataclass check: `key` is the field, relative to the dataclass."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def choice(key: str, value: Any, choices: Collection[str]) -> None:
    if value not in choices:
        raise FieldError(key, f"{value!r} is not valid; valid: {', '.join(choices)}")


def within(key: str, value: float, low: float, high: float) -> None:
    """`value` in [low, high]; the bounds keep every size, count and time to what can run (a
    count in the millions, a time limit within a year), and NaN fails every comparison."""
    if not low <= value <= high:
        raise FieldError(key, f"must be between {_number(low)} and {_number(high)}, found {_number(value)}")


WEEK_S = 7 * 86400
# A sweep's times, as a sweep file, a profile and the plan.json that records them must hold them.
TIME_RANGES = {
    "time_limit_min": (0.1, MAX_MINUTES),
    "timeout_s": (1, WEEK_S),
    "stall_s": (2, WEEK_S),
    "sample_s": (0.1, 3600),  # or 0: no sampling
}


def check_time(key: str, value: Any, name: str | None = None) -> None:
    """FieldError (under `name`, default `key`) unless `value` is a number in TIME_RANGES[key]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(name or key, f"is {value!r}, not a number")
    if not (key == "sample_s" and value == 0):
        within(name or key, value, *TIME_RANGES[key])


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


# Characters a line-based tool (a shell script line, an #SBATCH line, a CSV cell, a log) cannot
# carry as text: C0 controls but tab, DEL, and what Python's splitlines also breaks at.
_LINE_BREAKING = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")


def safe_text(key: str, value: str) -> None:
    """A value that must stay on one line: no newline, NUL or other control character."""
    if _LINE_BREAKING.search(value):
        raise FieldError(key, f"{value!r} holds a newline or another control character; give it on one line")


# Variables bench, Slurm or torchrun set for every job, or that change how the job script's
# bash reads its own lines (docs/concepts/hardening.md lists the sources): a sweep or profile cannot set
# them. A value here would at best be overwritten and at worst reach shell arithmetic, as
# SLURM_JOB_ID does in the script's MASTER_PORT line.
RESERVED_ENV_PREFIXES = (
    "SLURM_",
    "SBATCH_",
    "SRUN_",
    "SALLOC_",
    "BENCH_",
    "TORCHELASTIC_",
    "MASTER_",
    "LOCAL_",
    "GROUP_",
    "ROLE_",
    "BASH_FUNC_",
)
RESERVED_ENV = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "NODE_RANK",
        "PYTHON_EXEC",
        "IFS",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "BASH_XTRACEFD",
        "CDPATH",
        "GLOBIGNORE",
        "PROMPT_COMMAND",
    }
)


def check_env_name(key: str, name: str) -> None:
    if not ENV_NAME_RE.fullmatch(name):
        raise FieldError(key, f"{name!r} is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
        raise FieldError(
            key, f"{name} is set by bench, Slurm, torchrun or bash for every job; a sweep or profile cannot set it"
        )


# NAME= inside free text (a setup line `export WANDB_API_KEY=...`): the name is judged as a
# variable's name is. A run of name characters is tried once, where it starts (the lookbehind).
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=")


def secret_text(value: str) -> bool:
    """Whether recording the text `value` would record a secret: one by content (a token, a URL's
    password, benchmarks.common.redacted) or an assignment to a name a secret's (`KEY=...`)."""
    return looks_secret("", value) or any(secret_name(m[1]) for m in _ASSIGNMENT.finditer(value))


def check_recorded(key: str, value: Any) -> None:
    """Every text of a sweep or a profile reaches plan.json or a job script, so none may hold a
    secret (docs/concepts/hardening.md, "Secrets"): the scalars and lists of this level (the mappings are
    their own level, or variables, which check_env judges by name too)."""
    for i, text in enumerate(value if isinstance(value, list) else [value]):
        if isinstance(text, str) and secret_text(text):
            where = f"{key}[{i}]" if isinstance(value, list) else key
            raise SpecError(
                f"{where}: holds what looks like a secret (a token, a URL's password, or NAME=value of a secret's "
                "name), which plan.json and the job scripts would record; export it where bench runs and list "
                "its name under env_passthrough instead"
            )


def check_env(key: str, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        check_env_name(f"{key}.{name}", name)
        safe_text(f"{key}.{name}", value)
        if looks_secret(name, value):
            raise FieldError(
                f"{key}.{name}",
                "holds what looks like a secret, which plan.json and the job scripts "
                "would record; export it where bench runs and list its name under "
                "env_passthrough instead",
            )


# What a settings set may expect of its jobs' transport facts, and the kind of each value. The
# network facts are checked on multi-node jobs, intra_transport on jobs of several GPUs per node.
EXPECT_KEYS = {
    "net": "a network name as NCCL logs it (IB, Socket, AWS Libfabric) or Socket for gloo",
    "net_devices": "a list of devices, e.g. [mlx5_0, mlx5_1] or, for gloo, [eth0]",
    "link_layer": "IB or RoCE",
    "gdr": "true or false",
    "intra_transport": "a list among P2P/IPC, P2P/CUMEM, P2P/direct pointer, SHM, NVLS, CollNet",
    "nccl_version": "a version or its prefix, e.g. 2.21 or 2.21.5",
}
EXPECT_LISTS = ("net_devices", "intra_transport")
EXPECT_TEXT_RE = re.compile(r"[A-Za-z0-9_.:/+ -]{1,64}")


def check_expect(key: str, expect: dict[str, Any]) -> None:
    if not expect:
        raise FieldError(key, f"is empty; expect one or more of {', '.join(EXPECT_KEYS)}")
    for name, value in expect.items():
        if name not in EXPECT_KEYS:
            raise FieldError(f"{key}.{name}", f"unknown key; valid: {', '.join(EXPECT_KEYS)}")
        if name == "gdr":
            ok = isinstance(value, bool)
        elif name in EXPECT_LISTS:
            ok = (
                isinstance(value, tuple)
                and bool(value)
                and all(isinstance(v, str) and EXPECT_TEXT_RE.fullmatch(v) for v in value)
            )
        else:
            ok = isinstance(value, str) and bool(EXPECT_TEXT_RE.fullmatch(value))
        if not ok:
            raise FieldError(f"{key}.{name}", f"{value!r} is not valid; expected {EXPECT_KEYS[name]}")


def check_passthrough(key: str, names: tuple[str, ...]) -> None:
    for name in names:
        check_env_name(key, name)


# --------------------------------------------------------------------------- a mapping into a dataclass


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type):
        return {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}.get(
            tp.__name__, tp.__name__
        )
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0]).removeprefix('an ').removeprefix('a ')}s"
    return str(tp)


def _convert(tp: Any, value: Any, where: str, meta: typing.Mapping[str, Any]) -> Any:
    """Check `value` from YAML against the annotation `tp` and convert it (lists to tuples,
    sizes to bytes, nested mappings to dataclasses)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        concrete = [o for o in options if o is not type(None)]
        # null is None, except for a workload section, where an empty one means its defaults
        if (
            value is None
            and type(None) in options
            and not (dataclasses.is_dataclass(concrete[0]) and not meta.get("null"))
        ):
            return None
        if len(concrete) == 1:
            # A workload section left empty (`allreduce:`) means its defaults; `false` turns it
            # off (`--set workloads.real=false`).
            if value is False and type(None) in options and dataclasses.is_dataclass(concrete[0]):
                return None
            return _convert(concrete[0], value, where, meta)
        for option in options:
            try:
                return _convert(option, value, where, meta)
            except SpecError:
                pass
        raise SpecError(f"{where}: {value!r} is not {_type_name(tp)}")
    if tp is type(None):
        if value is None:
            return None
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, dict):
            return build(tp, value, where)
        if value is None:
            return build(tp, {}, where)
        raise SpecError(f"{where}: expected a mapping of {tp.__name__} settings, found {value!r}")
    elif origin is tuple:
        item_tp = typing.get_args(tp)[0]
        if isinstance(value, list):
            return tuple(_convert(item_tp, v, f"{where}[{i}]", {}) for i, v in enumerate(value))
        if meta.get("one_or_more") and not isinstance(value, dict):
            return (_convert(item_tp, value, where, {}),)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is int:
        if meta.get("size") and isinstance(value, str):
            try:
                return parse_size(value, allow_zero=bool(meta.get("zero")))
            except ValueError as exc:
                raise SpecError(f"{where}: {exc}") from None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise SpecError(f"{where}: expected a finite number, found {value!r}")
            return float(value)
    elif tp is bool and isinstance(value, bool):
        return value
    raise SpecError(f"{where}: expected {_type_name(tp)}, found {value!r}")


def _key(where: str, key: Any) -> str:
    """A mapping key, which must have been a string in the YAML: YAML 1.1 (PyYAML's) reads an
    unquoted on/off/yes/no/true/false as a boolean and digits as a number, so `ON: "1"` would
    otherwise define a variable named True."""
    if isinstance(key, str):
        return key
    why = " (YAML 1.1 reads unquoted on/off/yes/no/true/false as booleans)" if isinstance(key, bool) else ""
    raise SpecError(f'{where}: the key {key!r} is not a string{why}; quote the key in YAML, e.g. "ON": ...')


def _env_values(value: Any, where: str) -> dict[str, str]:
    """An environment mapping: names to strings; integers are accepted and written as digits."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a mapping of variable names to values, found {value!r}")
    out = {}
    for raw, v in value.items():
        k = _key(where, raw)
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise SpecError(f"{where}.{k}: expected a string (quote it in YAML), found {v!r}")
        out[k] = str(v)
    return out


def _env_set(body: Any, where: str) -> tuple[dict[str, str], dict[str, Any] | None]:
    """A settings set: its variables, and what it expects of the transport. Two forms: the
    variables alone (`ib: {NCCL_IB_HCA: mlx5_0}`), or `ib: {env: {...}, expect: {...}}`, told
    apart by their keys (env and expect only) holding mappings, which a variable cannot."""
    if (
        isinstance(body, dict)
        and body
        and set(body) <= {"env", "expect"}
        and any(isinstance(v, dict) or v is None for v in body.values())
    ):
        expect = body.get("expect")
        if expect is not None and not isinstance(expect, dict):
            raise SpecError(f"{where}.expect: expected a mapping such as {{net: IB, gdr: true}}, found {expect!r}")
        if expect is not None:
            expect = {_key(f"{where}.expect", k): tuple(v) if isinstance(v, list) else v for k, v in expect.items()}
        return _env_values(body.get("env"), f"{where}.env"), expect
    return _env_values(body, where), None


def build(cls: type, data: dict[str, Any], where: str) -> Any:
    """A checked dataclass from a YAML mapping; errors are `SpecError('where.key: ...')`."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    prefix = f"{where}." if where else ""
    kwargs: dict[str, Any] = {}
    fields = {name: f for name, f in fields.items() if not f.metadata.get("derived")}
    for raw, value in data.items():
        key = _key(where or "top level", raw)
        if key not in fields:
            raise SpecError(f"{prefix}{key}: unknown key; valid: {', '.join(fields)}")
        check_recorded(f"{prefix}{key}", value)
        kind = fields[key].metadata.get("mapping")
        if kind == "env":
            kwargs[key] = _env_values(value, f"{prefix}{key}")
        elif kind == "env_sets":
            if not isinstance(value, dict):
                raise SpecError(f"{prefix}{key}: expected a mapping of set names to variables, found {value!r}")
            kwargs[key], kwargs["nccl_expect"] = {}, {}
            for raw_set, body in value.items():
                name = _key(f"{prefix}{key}", raw_set)
                env, expect = _env_set(body, f"{prefix}{key}.{name}")
                kwargs[key][name] = env
                if expect is not None:
                    kwargs["nccl_expect"][name] = expect
        else:
            kwargs[key] = _convert(hints[key], value, f"{prefix}{key}", fields[key].metadata)
    missing = [
        name
        for name, f in fields.items()
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise SpecError(f"{prefix}{missing[0]}: required key is missing")
    try:
        return cls(**kwargs)
    except FieldError as exc:
        key = f"{prefix}{exc.key}" if exc.key else where or cls.__name__
        raise SpecError(f"{key}: {exc}") from None


# --------------------------------------------------------------------------- reading a file


MAX_FILE_BYTES = 1024**2  # a sweep or profile is a page of YAML
# The sweeps and cluster profiles bench ships (package data); the repository's sweeps/ links here
SHIPPED = Path(__file__).resolve().parents[1] / "sweeps"
MAX_DEPTH = 32  # sections nest four deep; 32 is room for any hand-written file
MAX_YAML_VALUES = 100_000  # scalars, lists and mappings after aliases are expanded


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what no sweep needs and a hostile file uses to crash or
    hang its reader: nesting past MAX_DEPTH (Python's recursion limit ends in a traceback) and
    aliases that expand past MAX_YAML_VALUES values (the "billion laughs", nine lines for 10^9)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._total = 0
        self._sizes: dict[int, int] = {}  # id(node) -> its size with aliases expanded

    def _count(self, n: int, mark: Any) -> None:
        self._total += n
        if self._total > MAX_YAML_VALUES:
            raise yaml.composer.ComposerError(
                None, None, f"more than {MAX_YAML_VALUES:,} values once aliases are expanded", mark
            )

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self._count(self._sizes.get(id(node), 1), event.start_mark)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        before = self._total
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._count(1, event.start_mark)
        self._sizes[id(node)] = self._total - before
        return node

    def compose_mapping_node(self, anchor: Any) -> Any:
        """A mapping, refused where it states a key twice: YAML 1.2 requires keys to be unique
        (the spec, 3.2.1.1 "Nodes"), but PyYAML keeps the last one and drops the first without a
        word, so that a profile's second NCCL_IB_HCA would silently replace its first. Keys are
        compared as written (tag and text), before a merge key (`<<`) brings any in: a key that
        overrides a merged one is the merge's purpose, not a duplicate."""
        node = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], Any] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            first = seen.setdefault((key.tag, key.value), key.start_mark)
            if first is not key.start_mark:
                raise DuplicateKey(key.value, first, key.start_mark)
        return node


class DuplicateKey(yaml.composer.ComposerError):
    """A mapping that states `key` twice: at `first`, then at `again` (marks of the file)."""

    def __init__(self, key: str, first: Any, again: Any) -> None:
        super().__init__(
            None, None, f"key {key!r} is given twice in one mapping (first at line {first.line + 1})", again
        )
        self.key = key


def load_yaml(text: str) -> Any:
    """YAML as `yaml.safe_load` reads it, within MAX_DEPTH and MAX_YAML_VALUES."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _shipped(path: Path, exc: OSError) -> str:
    """Where bench ships a missing `sweeps/...` file, which the README names relative to the
    repository: outside a checkout (a wheel's install) there is no sweeps/ there. '' for any
    other file."""
    parts = Path(path).parts
    if not isinstance(exc, FileNotFoundError) or len(parts) < 2 or parts[0] != "sweeps":
        return ""
    there = SHIPPED.joinpath(*parts[1:])
    return f"; bench ships {Path(path)} as {there}" if there.is_file() else ""


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """The top-level mapping of a YAML file, or a one-line SpecError naming the file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read {what} file ({exc.strerror or exc}){_shipped(path, exc)}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB; a {what} file is a page of YAML")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of {what} settings at the top level")
    return data
