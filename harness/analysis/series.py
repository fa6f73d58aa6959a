"""What makes two runs of a cluster comparable: the stack they ran on (docs/guides/fleet.md, "What a
series is").

A series is a cluster, a stack and a key. The stack is a documented list of fields of the run's
environment, as its ranks reported it (collect/gather.py), and of the cluster profile it was planned
with (plan.json): a change of any of them starts a new series, and a baseline draws on the runs
of the run's own series only. Each run stores its stack's fields (JSON) and their digest.

    gpu, gpu_driver, cuda, nccl, torch,     the hardware and software the ranks reported,
    backend, python, measurement_rules      each the list of values seen in the run
    profile.gpu_type, profile.partition,    which nodes the jobs asked Slurm for
    profile.constraint
    profile.hardware                        the stated links and peak (docs/concepts/expected.md)
    profile.container                       the image the steps ran in (docs/guides/containers.md)
    profile.env                             the variables the profile sets (NCCL_IB_HCA ...)

GPUs per node, node count, launcher and settings are in the key; the bench's version is not in
the stack, since its measurement rules are (docs/concepts/provenance.md). A run added before bench
recorded stacks has its environment's fields, taken from its stored environment, and no profile
fields: a field one of two runs did not record is no difference between them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

ENVIRONMENT_FIELDS = ("gpu", "gpu_driver", "cuda", "nccl", "torch", "backend", "python", "measurement_rules")
PROFILE_FIELDS = ("gpu_type", "partition", "constraint", "hardware", "container", "env")
NONE = "-"  # how a field with no value is shown


def of(environment: dict[str, Any], profile: dict[str, Any] | None) -> dict[str, Any]:
    """A run's stack: its environment (collect's lists of values seen) and its profile's fields.
    Of the container, its engine and image: mounts and options do not change what is measured."""
    stack: dict[str, Any] = {f: sorted(str(v) for v in environment.get(f) or ()) for f in ENVIRONMENT_FIELDS}
    profile = profile or {}
    for f in PROFILE_FIELDS:
        value = profile.get(f)
        if f == "container" and isinstance(value, dict):
            value = {k: value.get(k) for k in ("engine", "image")}
        stack[f"profile.{f}"] = value
    return stack


def recorded(stored: str | None, environment: str | None) -> dict[str, Any]:
    """The stack of a stored run: its fields, or for a run added before stacks were recorded,
    the environment's fields alone. Unreadable JSON records nothing."""
    try:
        if stored is not None:
            fields = json.loads(stored)
            return fields if isinstance(fields, dict) else {}
        env = json.loads(environment or "{}")
    except ValueError:
        return {}
    if not isinstance(env, dict):
        return {}
    return {f: sorted(str(v) for v in env.get(f) or ()) for f in ENVIRONMENT_FIELDS}


def digest(stack: dict[str, Any]) -> str:
    """12 hex digits naming a stack in `history list`, in the Grafana views and in messages."""
    text = json.dumps(stack, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'torch 2.3.1 -> 2.4.0' for each field both stacks recorded and they differ in."""
    return [
        f"{field} {_shown(old[field])} -> {_shown(new[field])}"
        for field in (*ENVIRONMENT_FIELDS, *(f"profile.{f}" for f in PROFILE_FIELDS))
        if field in old and field in new and old[field] != new[field]
    ]


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return not differences(a, b)


def _shown(value: Any) -> str:
    if value is None or value == []:
        return NONE
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)
