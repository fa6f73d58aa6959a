"""`bench report` on a real local run: one self-contained HTML file, images inline and nothing
fetched, and written even when a job's telemetry has a damaged line."""

from __future__ import annotations

import base64
import html.parser
import io
import json
import shutil

import pytest
from conftest import bench, copy_run, separating
from PIL import Image


class _Images(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.sources.append(attrs.get("src", ""))
        for key in ("href", "src"):
            if attrs.get(key) and not attrs[key].startswith("data:"):
                self.links.append(attrs[key])


def test_report_is_self_contained(real_run, tmp_path):
    other = copy_run(real_run, tmp_path / "other", time_factor=separating(real_run))
    out = tmp_path / "report.html"
    bench("report", str(real_run), "--compare", str(other), "--out", str(out))
    text = out.read_text()
    parser = _Images()
    parser.feed(text)
    assert parser.links == []  # nothing to fetch: opens offline
    assert len(parser.sources) >= 5  # scaling, the step's breakdown, busbw, and the two comparison plots
    for src in parser.sources:
        assert src.startswith("data:image/png;base64,")
        img = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        img.load()
        assert img.size[0] > 100 and img.size[1] > 100
    for heading in ("Environment", "Jobs", "Stragglers", "Scaling", "Where the step went", "Collectives", "Comparison"):
        assert f"<h2>{heading}" in text
    assert 'alt="where each training step went"' in text
    created = json.loads((real_run / "plan.json").read_text())["created"][:10]
    assert f"<h1>bench report: local on this machine (local executor), {created}</h1>" in text
    assert "<summary>The sweep's parameters, as run</summary>\n<pre>name: local\n" in text
    # the compact table: per job its largest size (1M), which is also the nearest to DDP's 25 MiB
    # bucket; every size (64K, 256K, 1M for 2 jobs) behind <details>
    # from the compact table's caption on: the plot above it is base64, which may hold "64K" by chance
    collectives = text[text.index("<p>Per job, the largest message") : text.index("<h2>Comparison")]
    compact, full = collectives.split("<summary>Every message size (6 rows)</summary>")
    assert compact.count("<tr>") == 1 + 2 and full.split("</details>")[0].count("<tr>") == 1 + 6
    assert "1M" in compact and "64K" not in compact and "64K" in full
    assert "n2-g1-torchrun-default" in text and "COMPLETED" in text
    # every figure drawn at once, each put back in its place: a job's timeline in its own details
    assert "<!--figures" not in text
    jobs = sorted(p.name for p in real_run.glob("jobs/*") if (p / "telemetry").is_dir())
    assert jobs and text.count('alt="timeline of ') == len(jobs)
    for job in jobs:
        folded = text[text.index(f"<details><summary>{job}: ") :].split("</details>")[0]
        assert folded.count("<img ") == 1 and f'alt="timeline of {job}"' in folded, job
    assert '<tr class="slower"><td>slower</td><td>busbw GB/s</td>' in text
    # no job has three nodes: nothing was judged, and the report says so rather than "none"
    assert (
        "<p>Not judged: no all-reduce job of 3 or more nodes completed, and it takes 3 nodes to tell "
        "which end of a slow pair is slow.</p>" in text
    )
    assert "None in" not in text


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage",
    [
        {"self_cpu_s": "0.5"},  # a KeyError once, when absent
        {"cpu": "0 1 2 3"},  # a TypeError
        {"net": {"eth0": [1]}},  # an IndexError
        {"net": {"eth0": ["a", "b", "c", "d"]}},
        {"t": float("inf")},
        {"cpu": 7},
    ],
)
def test_a_damaged_telemetry_line_is_skipped(real_run, tmp_path, damage):
    """`bench report` ended with exit 70 on one damaged sample line of a job's telemetry; a
    damaged line is skipped as a torn one is, and the report is written."""
    copy = tmp_path / "run"
    shutil.copytree(real_run, copy)
    samples = sorted(copy.glob("jobs/*/telemetry/*.samples.jsonl"))
    assert samples, "the local executor samples every job"
    for path in samples:
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        for line in lines:
            if line.get("kind") == "sample":
                line.update(damage)
                break
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = bench("report", str(copy), check=False)
    assert r.returncode == 0 and (copy / "report.html").is_file(), r.describe()
