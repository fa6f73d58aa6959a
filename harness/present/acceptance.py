"""`bench accept`'s verdict as files (docs/guides/accept.md): verdict.json, and report.html, one
self-contained page to sign: the verdict and why, what was checked and on which nodes, with
which bench and software, what to drain, the node check's findings and heatmap, each reference
against what the sweep measured, and the sweep's jobs."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.results import read_regular
from harness.analysis.sides import key_texts, records
from harness.config.hostlists import hostlist
from harness.errors import EXIT_FOUND, EXIT_UNJUDGED
from harness.files import inside
from harness.nodes.verdict import drain_command
from harness.present.report import STYLE, _e, _img, _table
from harness.present.tables import fmt_value
from harness.run import provenance
from harness.run.rundir import RUN_FILE_LIMIT, now

if TYPE_CHECKING:
    from harness.analysis.compare import Comparison
    from harness.config.cluster_profile import ClusterProfile

REPORT = "report.html"
VERDICT = "verdict.json"
# What the report lists of the software the sweep ran on (the summary's environment)
SOFTWARE = (
    ("bench_version", "bench on the nodes"),
    ("measurement_rules", "measurement rules"),
    ("torch", "torch"),
    ("nccl", "NCCL"),
    ("cuda", "CUDA"),
    ("gpu_driver", "GPU driver"),
    ("gpu", "GPU"),
    ("python", "Python"),
    ("backend", "backend"),
)


@dataclass
class Outcome:
    """What each part of the acceptance found; `status` is the command's exit status."""

    nodes_status: int
    nodes_verdict: dict[str, Any]
    sweep_status: int | None = None  # None: not run
    jobs: list[tuple[str, str, str | None]] = field(default_factory=list)  # (job, state, reason)
    comparison: Comparison | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    # the collective's soak (harness/accept.py, _judge_soak): what, windows, drift; None: not run
    soak: dict[str, Any] | None = None
    reasons: list[str] = field(default_factory=list)  # why it did not pass, one line each
    unjudged: bool = False

    @property
    def status(self) -> int:
        if not self.reasons:
            return 0
        return EXIT_UNJUDGED if self.unjudged else EXIT_FOUND

    def line(self) -> str:
        return "ACCEPTED" if not self.reasons else f"NOT ACCEPTED: {'; '.join(self.reasons)}"


def references(outcome: Outcome) -> list[dict[str, Any]]:
    """Each reference row: its key in words, the figure stated, the figure measured, the verdict."""
    cmp = outcome.comparison
    if cmp is None or not len(cmp.table):
        return []
    t = cmp.table
    keys = key_texts(t).tolist()
    return [
        {"key": k, "metric": r["metric"], "reference": r["a"], "measured": r["b"], "verdict": r["verdict"],
         "note": r["note"] or ""}
        for k, r in zip(keys, records(t))
    ]  # fmt: skip


def as_json(outcome: Outcome, profile: ClusterProfile, bench: dict[str, Any], nodelist: str | None) -> dict[str, Any]:
    v = outcome.nodes_verdict
    return {
        "accepted": not outcome.reasons,
        "status": outcome.status,
        "reasons": outcome.reasons,
        "when": now(),
        "cluster": profile.name,
        "bench": bench,
        "environment": outcome.environment,
        "nodes": {
            "asked": nodelist,
            "hosts": v.get("hosts", []),
            "clean": v.get("clean", False),
            "drain": v.get("drain", ""),
            "nodes_named": v.get("nodes_named", []),
            "links_named": v.get("links_named", []),
            "uplinks_named": v.get("uplinks_named", []),
            "not_judged": v.get("not_judged", []),
            "not_read": v.get("not_read", []),
            "exit_status": outcome.nodes_status,
            "soak_passes": (v.get("soak") or {}).get("passes"),
        },
        "sweep_ran": outcome.sweep_status is not None,
        "jobs": [{"job": j, "state": s, "reason": r} for j, s, r in outcome.jobs],
        "references": references(outcome),
        "soak": outcome.soak,
    }


def write(out: Path, outcome: Outcome, profile: ClusterProfile, bench: dict[str, Any], nodelist: str | None) -> None:
    data = as_json(outcome, profile, bench, nodelist)
    inside.write(out, VERDICT, (json.dumps(data, indent=2, default=str) + "\n").encode())
    inside.write(out, REPORT, render(out, data).encode())


def render(out: Path, data: dict[str, Any]) -> str:
    nodes = data["nodes"]
    hosts = nodes["hosts"]
    accepted = data["accepted"]
    verdict = "ACCEPTED" if accepted else "NOT ACCEPTED"
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>bench accept: {_e(data['cluster'])}</title>",
        f"<style>{STYLE} .verdict {{ font-size: 1.4em; padding: 0.5em 1em; }}"
        " .pass { background: #e3f6e3; } .fail { background: #fde2e1; }</style></head><body>",
        f"<h1>Acceptance of cluster {_e(data['cluster'])}</h1>",
        f"<p class='verdict {'pass' if accepted else 'fail'}'><b>{verdict}</b></p>",
    ]
    if data["reasons"]:
        parts.append("<ul>" + "".join(f"<li>{_e(r)}</li>" for r in data["reasons"]) + "</ul>")
    env = data["environment"]
    parts += [
        "<h2>What was checked</h2>",
        _table(
            ["", ""],
            [
                ["when (UTC)", data["when"]],
                ["nodes asked for", nodes["asked"] or "the profile's partition"],
                ["nodes checked", f"{len(hosts)}: {hostlist(hosts)}" if hosts else "none"],
                ["node check", _check_line(nodes)],
                ["acceptance sweep", f"{len(data['jobs'])} job(s)" if data["sweep_ran"] else "not run"],
                ["references", f"{len(data['references'])} judged"],
                ["soak", _soak_line(data)],
            ],
        ),
        "<h2>With which bench and software</h2>",
        _table(
            ["", ""],
            [["bench (this command)", provenance.describe(data["bench"])]]
            + [[label, ", ".join(map(str, env[k]))] for k, label in SOFTWARE if env.get(k)],
        ),
        "<h2>What to drain</h2>",
    ]
    if nodes["drain"]:
        parts.append(f"<p><b>{_e(nodes['drain'])}</b></p>")
        parts.append("<pre>" + _e(drain_command(nodes["drain"], "bench accept")) + "</pre>")
    else:
        parts.append(
            "<p>Nothing" + ("" if nodes["clean"] else ": but the check did not judge everything (below)") + ".</p>"
        )
    named = [[n["node"], "; ".join(n["reasons"])] for n in nodes["nodes_named"]]
    named += [[" - ".join(link["nodes"]), "; ".join(link["reasons"])] for link in nodes["links_named"]]
    named += [["uplink " + " - ".join(u["leaves"]), "; ".join(u["reasons"])] for u in nodes["uplinks_named"]]
    parts.append("<h2>The node check</h2>")
    if named:
        parts.append(_table(["node, link or uplink", "why"], named, classes=["failed"] * len(named)))
    if nodes["not_judged"]:
        parts.append("<p>Not judged:</p><ul>" + "".join(f"<li>{_e(x)}</li>" for x in nodes["not_judged"]) + "</ul>")
    if nodes["not_read"]:  # how the nodes are set up, said on the page that is signed
        parts.append("<p>Not read:</p><ul>" + "".join(f"<li>{_e(x)}</li>" for x in nodes["not_read"]) + "</ul>")
    heatmap = out / "nodes" / "heatmap.png"
    if heatmap.is_file():
        with contextlib.suppress(OSError):
            parts.append(_img(read_regular(heatmap, RUN_FILE_LIMIT), "each pair's figure, relative to its nodes'"))
    parts.append("<h2>Reference figures</h2>")
    refs = data["references"]
    if refs:
        parts.append(
            _table(
                ["key", "metric", "reference", "measured", "verdict", "note"],
                [
                    [
                        r["key"],
                        r["metric"],
                        fmt_value(r["reference"]),
                        fmt_value(r["measured"]),
                        r["verdict"],
                        r["note"],
                    ]
                    for r in refs
                ],
                numeric={2, 3},
                classes=[r["verdict"].replace(" ", "-") for r in refs],
            )
        )
    else:
        parts.append("<p>None judged: the acceptance sweep did not run.</p>")
    if data["jobs"]:
        parts.append("<h2>The sweep's jobs</h2>")
        parts.append(
            _table(
                ["job", "state", "reason"],
                [[j["job"], j["state"], j["reason"] or ""] for j in data["jobs"]],
                classes=["" if j["state"] == "COMPLETED" else "failed" for j in data["jobs"]],
            )
        )
    parts += [
        "<h2>Signed</h2>",
        "<p>Checked by ____________________ &nbsp; Date ____________ &nbsp; Signature ____________________</p>",
        "<p>Files: nodes/ (the node check: verdict.json, nodes.csv, pairs.csv), sweep/ (the acceptance"
        " sweep), regress/ (junit.xml, report.md), verdict.json.</p>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _soak_line(data: dict[str, Any]) -> str:
    """The soaks, of the pairs and of the collective, in a line (docs/guides/accept.md, "Soak")."""
    passes, soak = data["nodes"].get("soak_passes"), data.get("soak")
    parts = [f"the pairs: {passes} pass(es)"] if passes is not None else []
    if soak:
        parts.append(
            f"{soak['what']}: {soak['windows']} windows over {soak['seconds']:g} s, busbw p10 {soak['p10']:.3g},"
            f" median {soak['median']:.3g}, p90 {soak['p90']:.3g} GB/s; its end over its start {soak['drift']:.2f}"
        )
    return "; ".join(parts) or "not run"


def _check_line(nodes: dict[str, Any]) -> str:
    if nodes["clean"]:
        return "every node and link passed"
    named = len(nodes["nodes_named"]) + len(nodes["links_named"]) + len(nodes["uplinks_named"])
    if named:
        return f"{named} node(s), link(s) or uplink(s) named (exit {nodes['exit_status']})"
    return f"not everything judged (exit {nodes['exit_status']})"
