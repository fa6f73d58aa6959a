"""`bench dashboard`: a history as a static site (docs/guides/dashboard.md). The index is a matrix of
clusters by key groups with the last night's verdict of each; a page per cluster draws each key
over the nights with the gate's band, failed nights and change points, and the scaling
efficiency of its newest night against its last healthy one; a page per key sets every
cluster's series of it side by side; a page per cluster's node checks holds the per-node series,
the pair heatmaps and the drain list; feed.xml is an Atom feed of the regressions.

Every page is one HTML file with its style inline and no script, under a Content-Security-Policy
that loads nothing: it opens from file:// or any web server, and asks the network for nothing.
Every text from the history passes through charts.esc. The same history gives the same bytes:
nothing in a page depends on the clock, the order rows come back in, or where the history is.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.compare import FAILED, FASTER, ONLY_A, SAME, SLOWER, UNJUDGED
from harness.analysis.gating import catch_text
from harness.analysis.overview import (
    CODES,
    GROUPS,
    NODE_GROUP,
    NOT_JUDGED,
    Checks,
    Cluster,
    Series,
    date_of,
    efficiency,
    healthy,
    rank,
    regressions,
)
from harness.analysis.sides import METRICS
from harness.nodes.rounds import METRICS as NODE_METRICS
from harness.present import sitedir
from harness.present.charts import Frame, Mark, esc, figure, heatmap, minus, percent, sparkline, timeseries, value_range

NIGHTS_LISTED = 30  # rows of a cluster's table of nights, and checks of its node page, newest first
WORST_NODES = 32  # nodes listed per node metric, worst first
HEATMAP_NODES = 64  # nodes a heatmap shows; a larger check shows its worst pairs as a table
FEED_ENTRIES = 50
RECENT_DAYS = 7  # the index's list of regressions: the week up to the newest night

# The words and colours of the verdicts (the index's cells and every page): the gate's verdicts
# of analysis/compare.py, "no significant change" as the "unchanged".
SHOWN = {
    FAILED: ("failed", "failed"),
    SLOWER: ("slower", "slower"),
    UNJUDGED: ("cannot judge", "cannot"),
    ONLY_A: ("not run", "cannot"),  # a key of the baseline the night never planned
    SAME: ("unchanged", "same"),
    FASTER: ("faster", "faster"),
    NOT_JUDGED: ("not judged", "not"),
    "": ("none", "none"),
}
UNITS = {
    "busbw_gbps": "GB/s",
    "algbw_gbps": "GB/s",
    "time_us": "µs",
    "images_per_s": "images/s",
    "images_per_s_per_gpu": "images/s",
    "tokens_per_s": "tokens/s",
    "tokens_per_s_per_gpu": "tokens/s",
    "step_time_ms": "ms",
}

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}h3{font-size:1em;margin:1.2em 0 .2em;overflow-wrap:anywhere}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}nav{margin-bottom:1em}nav a{margin-right:1em}
.v{display:inline-block;padding:0 .4em;border-radius:3px}.failed{background:#8b0000;color:#fff}
.slower{background:#d9534f;color:#fff}.cannot{background:#f0ad4e}.same{background:#e6e6e6}
.faster{background:#5cb85c;color:#fff}.not{background:#fff;border:1px dashed #999}.none{color:#999}
td.cell a{color:inherit;text-decoration:none;display:block}small{color:#555}
svg.chart{width:100%;max-width:640px;height:auto;display:block}svg text{font:11px sans-serif;fill:#333}
.band{fill:#9ecae1;fill-opacity:.55}.line{fill:none;stroke:#08519c;stroke-width:1.5}
.bad{stroke:#d62728;stroke-width:6;stroke-linecap:round}
.cross,.gate{stroke:#d62728;stroke-width:2}
line.grid{stroke:#eee}line.change{stroke:#555;stroke-dasharray:3 3}text.change{font-weight:bold}
.spark .line{stroke-width:1.2}.key{overflow-wrap:anywhere}
"""


def slug(prefix: str, *parts: str) -> str:
    """A file name for a page of untrusted names: a readable stem and a hash of the names."""
    joined = "\x00".join(parts)
    stem = re.sub(r"[^a-z0-9]+", "-", joined.lower()).strip("-")[:40]
    digest = hashlib.sha256(joined.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{prefix}-{stem + '-' if stem else ''}{digest}.html"


def verdict(v: str, words: str | None = None) -> str:
    shown, css = SHOWN[v]
    return f'<span class="v {css}">{esc(words or shown)}</span>'


def page(title: str, body: str) -> bytes:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>{esc(title)}</title><style>{STYLE}</style>"
        '<link rel="alternate" type="application/atom+xml" title="Regressions" href="feed.xml">'
        f"</head><body>\n{body}\n</body></html>\n"
    ).encode()


def metric_words(metric: str) -> str:
    return METRICS[metric].label if metric in METRICS else metric


def unit_of(metric: str) -> str:
    return UNITS.get(metric, "")


@dataclass(frozen=True)
class KeyPage:
    """A key across clusters: every KEYS column but the NCCL set, and the metric."""

    title: str
    metric: str
    group: str

    @property
    def file(self) -> str:
        return slug("key", self.title, self.metric)


def key_page(s: Series) -> KeyPage:
    title = s.text.rsplit(", ", 1)[0]  # the key without its NCCL set, which the page's rows tell apart
    return KeyPage(title, s.metric, s.group)


# --------------------------------------------------------------------------- the index


def index(clusters: list[Cluster], keys: dict[KeyPage, list[tuple[Cluster, Series]]]) -> bytes:
    cells = {c.name: {g: c.cell(g) for g in GROUPS} for c in clusters}
    order = sorted(clusters, key=lambda c: (sorted(rank(v) for v, _ in cells[c.name].values()), c.name))
    head = "".join(f"<th>{esc(g)}</th>" for g in GROUPS)
    rows = []
    for c in order:
        tds = []
        for g in GROUPS:
            v, at = cells[c.name][g]
            if at is None:
                tds.append('<td class="cell none">none</td>')
                continue
            if g == NODE_GROUP:
                assert c.checks is not None
                href, day = slug("nodes", c.name), c.checks.days[at]
            else:
                href, day = slug("cluster", c.name) + "#" + group_id(g), c.nights[at].day
            tds.append(
                f'<td class="cell {SHOWN[v][1]}"><a href="{href}">{esc(SHOWN[v][0])}<br>'
                f"<small>{date_of(day)}</small></a></td>"
            )
        rows.append(f'<tr><th><a href="{slug("cluster", c.name)}">{esc(c.name)}</a></th>{"".join(tds)}</tr>')
    newest = max((n.day for c in clusters for n in c.nights), default=None)
    recent = [r for r in regressions(clusters) if newest is not None and r[0].nights[r[1]].day >= newest - RECENT_DAYS]
    items = "".join(
        f'<li>{date_of(c.nights[i].day)} <a href="{slug("cluster", c.name)}">{esc(c.name)}</a> run {c.nights[i].run}: '
        f"{regression_words(c, i, found)}</li>"
        for c, i, found in recent
    )
    by_group: dict[str, list[KeyPage]] = {}
    for k in keys:
        by_group.setdefault(k.group, []).append(k)
    key_lists = "".join(
        f"<h3>{esc(g)}</h3><ul>"
        + "".join(
            f'<li><a class="key" href="{k.file}">{esc(k.title)}</a> <small>{esc(metric_words(k.metric))}</small></li>'
            for k in sorted(by_group[g], key=lambda k: (k.title, k.metric))
        )
        + "</ul>"
        for g in GROUPS
        if g in by_group
    )
    body = (
        "<h1>bench: the fleet</h1>"
        f"<p>{len(clusters)} cluster{'s' if len(clusters) != 1 else ''}; the newest night "
        f"{date_of(newest) if newest is not None else 'none'}. Each cell is the verdict of its cluster's newest "
        'night on the keys of its group (its worst key), the worst clusters first. <a href="feed.xml">Atom feed of '
        "regressions</a>.</p>"
        f'<table class="matrix"><tr><th>cluster</th>{head}</tr>{"".join(rows)}</table>'
        f"<h2>Regressions in the {RECENT_DAYS} days to the newest night</h2>"
        + (f"<ul>{items}</ul>" if items else "<p>None.</p>")
        + f"<h2>Keys across clusters</h2>{key_lists or '<p>None judged yet.</p>'}"
    )
    return page("bench: the fleet", body)


def group_id(group: str) -> str:
    return "g" + str(GROUPS.index(group))


def regression_words(c: Cluster, i: int, found: list[Series]) -> str:
    """What regressed on night `i`, escaped: the gate's verdict, and the first keys."""
    n = c.nights[i]
    gate = f"gate {n.gate}" if n.gate else "not judged"
    if not found:
        return esc(f"{gate}, failed for what it ran on")
    shown = "; ".join(
        f"{esc(s.text)} {esc(metric_words(s.metric))} {CODES[int(s.verdict[s.at == i][0])]}" for s in found[:3]
    )
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return f"{esc(gate)}, {len(found)} key{'s' if len(found) != 1 else ''}: {shown}{more}"


# --------------------------------------------------------------------------- a cluster


def series_chart(s: Series, c: Cluster, frame: Frame, changes: list[Mark], label: str) -> str:
    import numpy as np

    days = np.array([c.nights[i].day for i in s.at.tolist()], dtype=float)
    bad = s.verdict <= CODES.index(SLOWER)
    failed_days = np.array([n.day for n in c.nights if n.gate == "failed"], dtype=float)
    return timeseries(frame, days, s.value, s.low, s.high, bad, failed_days, changes, unit_of(s.metric), label)


def cluster_page(c: Cluster) -> bytes:
    import numpy as np

    nav = f'<nav><a href="index.html">the fleet</a><a href="{slug("nodes", c.name)}">node checks</a></nav>'
    if not c.nights:
        return page(f"{c.name}: bench", f"{nav}<h1>{esc(c.name)}</h1><p>No run in the history; node checks only.</p>")
    first, last = c.nights[0], c.nights[-1]
    days = (first.day, last.day)
    newest = c.last_judged()
    parts = [
        nav,
        f"<h1>{esc(c.name)}</h1>",
        f"<p>{len(c.nights)} night{'s' if len(c.nights) != 1 else ''} from {first.date} to {last.date}; "
        f"{len(c.series)} key{'s' if len(c.series) != 1 else ''} judged. A chart draws a key's figure each night "
        "it was judged, the gate's band shaded, a red dot where the key was slower or failed, a red tick under each "
        "night the gate failed, and each stored change point dashed with its size.</p>",
    ]
    parts.append(efficiency_section(c, newest))
    marks: dict[tuple[str, str], list[tuple[float, str, str]]] = {}
    for ch in c.changes:
        words = f"{c.nights[ch.at].date}: {percent(ch.change)} ({figure(ch.before, unit_of(ch.metric))} → "
        words += f"{figure(ch.after, unit_of(ch.metric))})"
        marks.setdefault((ch.metric, ch.key), []).append((c.nights[ch.at].day, percent(ch.change), words))
    for g in GROUPS[:-1]:
        found = [s for s in c.series if s.group == g]
        if not found:
            continue
        found.sort(key=lambda s: (rank(s.last), s.text, s.metric))
        parts.append(f'<h2 id="{group_id(g)}">{esc(g)}</h2>')
        for s in found:
            unit = unit_of(s.metric)
            here = marks.get((s.metric, s.text), [])
            (lo, hi), log = value_range(s.value, s.low, s.high)
            frame = Frame(days, (lo, hi), log)
            i = len(s.at) - 1
            band = (
                f"band {figure(s.low[i], unit)} to {figure(s.high[i], unit)}"
                if np.isfinite(s.low[i]) and np.isfinite(s.high[i])
                else "no band"
            ) + caught(s, i)
            parts.append(
                f'<h3 class="key">{esc(s.text)} · {esc(metric_words(s.metric))}</h3>'
                f"<p>{verdict(s.last)} on {c.nights[int(s.at[-1])].date}: {esc(figure(s.value[i], unit))}, {esc(band)}"
                + "".join(f"; change {esc(w)}" for _, _, w in here)
                + f' · <a href="{key_page(s).file}">across clusters</a></p>'
                + series_chart(s, c, frame, [Mark(d, t) for d, t, _ in here], f"{s.text} {metric_words(s.metric)}")
            )
    parts.append("<h2>Nights, newest first</h2>" + nights_table(c))
    return page(f"{c.name}: bench", "".join(parts))


def nights_table(c: Cluster) -> str:
    rows = []
    for n in reversed(c.nights[-NIGHTS_LISTED:]):
        v = n.gate or NOT_JUDGED
        shown = verdict(
            {"passed": SAME, "failed": FAILED, "cannot judge": UNJUDGED}.get(v, NOT_JUDGED),
            "passed" if v == "passed" else None,
        )
        rows.append(
            f'<tr><td>{n.date}</td><td class="n">{n.run}</td><td>{esc(n.label or "")}</td><td>{shown}</td>'
            f'<td>{esc(n.accepted or "")}</td><td class="n">{n.failed_rows}</td></tr>'
        )
    more = f"<p><small>and {len(c.nights) - NIGHTS_LISTED} older</small></p>" if len(c.nights) > NIGHTS_LISTED else ""
    return (
        "<table><tr><th>night</th><th>run</th><th>label</th><th>gate</th><th>accepted</th><th>failed rows</th></tr>"
        + "".join(rows)
        + "</table>"
        + more
    )


def efficiency_section(c: Cluster, newest: int | None) -> str:
    head = "<h2>Scaling efficiency</h2>"
    if newest is None:
        return head + "<p>No night with figures.</p>"
    base = healthy(c, newest)
    now = efficiency(c, newest)
    then = efficiency(c, base) if base is not None else {}
    if not now:
        return head + "<p>The newest night has no training keys.</p>"
    against = f"the last healthy night, {c.nights[base].date}" if base is not None else "no healthy night before it"
    rows = []
    for config, by_gpus in now.items():
        workload, scaling, launcher, settings, _ = config
        for gpus, e in by_gpus.items():
            old = then.get(config, {}).get(gpus)
            change = minus(f"{(e - old) * 100:+.1f} points") if old is not None else ""
            rows.append(
                f"<tr><td>{esc(workload)} {esc(scaling)}, {esc(launcher)}, {esc(settings)}</td><td class=n>{gpus}</td>"
                f'<td class="n">{e:.1%}</td><td class="n">{f"{old:.1%}" if old is not None else "none"}</td>'
                f'<td class="n">{change}</td></tr>'
            )
    return (
        head + f"<p>Throughput per GPU over that of the fewest GPUs (speedup over ideal speedup), the newest night "
        f"{c.nights[newest].date} against {against}.</p>"
        "<table><tr><th>configuration</th><th>GPUs</th><th>newest</th><th>last healthy</th><th>change</th></tr>"
        + "".join(rows)
        + "</table>"
    )


# --------------------------------------------------------------------------- a key across clusters


def caught(s: Series, i: int) -> str:
    """', catches a fall ≥ 30%' of the key's night `i`, where the gate said what it could catch
    (docs/concepts/noise.md, "What a key can catch"); '' where it did not."""
    return f", catches a fall {catch_text(s.catches[i])}" if s.catches[i] == s.catches[i] else ""


def across_page(k: KeyPage, members: list[tuple[Cluster, Series]]) -> bytes:
    import numpy as np

    days = (min(c.nights[int(s.at[0])].day for c, s in members), max(c.nights[int(s.at[-1])].day for c, s in members))
    (lo, hi), log = value_range(*(a for _, s in members for a in (s.value, s.low, s.high)))
    frame = Frame(days, (lo, hi), log)
    unit = unit_of(k.metric)
    parts = [
        '<nav><a href="index.html">the fleet</a></nav>',
        f'<h1 class="key">{esc(k.title)} · {esc(metric_words(k.metric))}</h1>',
        f"<p>Every cluster and NCCL set that ran this key, on one time axis and one {'log' if log else 'linear'} "
        f"value axis ({esc(figure(lo, unit))} to {esc(figure(hi, unit))}).</p>",
    ]
    for c, s in sorted(members, key=lambda m: (m[0].name, m[1].key["nccl_config"])):
        i = len(s.at) - 1
        marks = [
            Mark(c.nights[ch.at].day, percent(ch.change))
            for ch in c.changes
            if (ch.metric, ch.key) == (s.metric, s.text)
        ]
        parts.append(
            f'<h3><a href="{slug("cluster", c.name)}">{esc(c.name)}</a> · NCCL set {esc(s.key["nccl_config"])}</h3>'
            f"<p>{verdict(s.last)} on {c.nights[int(s.at[-1])].date}: {esc(figure(s.value[i], unit))}"
            + (f", median {esc(figure(float(np.nanmedian(s.value)), unit))}" if np.isfinite(s.value).any() else "")
            + esc(caught(s, i))
            + "</p>"
            + series_chart(s, c, frame, marks, f"{c.name} {s.text}")
        )
    return page(f"{k.title}: bench", "".join(parts))


# --------------------------------------------------------------------------- node checks


def nodes_page(c: Cluster) -> bytes:
    import numpy as np

    nav = f'<nav><a href="index.html">the fleet</a><a href="{slug("cluster", c.name)}">{esc(c.name)}</a></nav>'
    ch = c.checks
    if ch is None or not ch.entries:
        return page(f"{c.name} nodes: bench", f"{nav}<h1>{esc(c.name)}: node checks</h1><p>No node check.</p>")
    last = len(ch.entries) - 1
    parts = [
        nav,
        f"<h1>{esc(c.name)}: node checks</h1>",
        f"<p>{len(ch.entries)} check{'s' if len(ch.entries) != 1 else ''}; the newest on {date_of(ch.days[last])} "
        f"of {esc(str(ch.entries[last].nodes))} nodes: {verdict(ch.verdict(last))} "
        f"{esc(ch.entries[last].named or 'nothing named')}</p>",
        "<h2>Drain list</h2>",
    ]
    drain = ch.first_named()
    parts.append(
        "<table><tr><th>node</th><th>first named</th><th>checks since</th></tr>"
        + "".join(
            f"<tr><td>{esc(node)}</td><td>{date_of(ch.days[i])}</td><td class=n>{last - i + 1}</td></tr>"
            for node, i in drain
        )
        + "</table>"
        if drain
        else "<p>The newest check names no node to drain.</p>"
    )
    by_metric: dict[tuple[str, str], dict[str, list[tuple[int, float]]]] = {}
    for i, name, metric, value in ch.figures:
        scope, _, who = name.partition(" ")
        by_metric.setdefault((scope, metric), {}).setdefault(who, []).append((i, value))
    parts.append(
        "<h2>Nodes, worst first</h2><p>Each node's figure in every check (its own, or its score: the median "
        "over its partners), the newest check's worst nodes first.</p>"
    )
    for (scope, metric), nodes in sorted(by_metric.items()):
        if scope != "node" or metric not in NODE_METRICS:
            continue
        label, unit, _ = NODE_METRICS[metric]
        latest = {n: dict(v).get(last) for n, v in nodes.items()}
        ranked = sorted((v, n) for n, v in latest.items() if v is not None)
        median = float(np.median([v for v, _ in ranked])) if ranked else float("nan")
        rows = []
        for v, n in ranked[:WORST_NODES]:
            line = np.full(len(ch.entries), np.nan)
            for i, x in nodes[n]:
                line[i] = x
            rows.append(
                f'<tr><td>{esc(n)}</td><td class="n">{esc(figure(v, unit))}</td><td class="n">{v / median:.0%}</td>'
                f"<td>{sparkline(line[-NIGHTS_LISTED:])}</td></tr>"
            )
        more = len(ranked) - WORST_NODES
        parts.append(
            f"<h3>{esc(label)} ({esc(unit)})</h3><table><tr><th>node</th><th>newest</th><th>of the median</th>"
            f"<th>the last {NIGHTS_LISTED} checks</th></tr>{''.join(rows)}</table>"
            + (f"<p><small>and {more} more nodes</small></p>" if more > 0 else "")
        )
    parts.append("<h2>Pairs: the newest check beside the one before</h2>")
    for (scope, metric), pairs in sorted(by_metric.items()):
        if scope != "pair" or metric not in NODE_METRICS:
            continue
        label, unit, _ = NODE_METRICS[metric]
        parts.append(f"<h3>{esc(label)} ({esc(unit)})</h3><div>")
        for i in (last, last - 1):
            if i >= 0:
                parts.append(pair_map(ch, pairs, i, unit, f"{c.name} {label} {date_of(ch.days[i])}"))
        parts.append("</div>")
    if ch.changes:
        parts.append(
            "<h2>Change points</h2><ul>"
            + "".join(
                f"<li>{date_of(ch.days[x.at])} {esc(x.key)} {esc(x.metric)}: {percent(x.change)} "
                f"({esc(figure(x.before))} → {esc(figure(x.after))})</li>"
                for x in ch.changes
            )
            + "</ul>"
        )
    parts.append(
        "<h2>Checks, newest first</h2><table><tr><th>check</th><th>id</th><th>nodes</th><th>verdict</th>"
        "<th>named</th></tr>"
        + "".join(
            f'<tr><td>{date_of(ch.days[i])}</td><td class="n">{esc(str(e.id))}</td>'
            f'<td class="n">{esc(str(e.nodes))}</td>'
            f"<td>{verdict(ch.verdict(i))}</td><td>{esc(e.named)}</td></tr>"
            for i, e in reversed(list(enumerate(ch.entries))[-NIGHTS_LISTED:])
        )
        + "</table>"
    )
    return page(f"{c.name} nodes: bench", "".join(parts))


def pair_map(ch: Checks, pairs: dict[str, list[tuple[int, float]]], i: int, unit: str, title: str) -> str:
    import numpy as np

    found: dict[tuple[str, str], float] = {}
    for who, values in pairs.items():
        a, _, b = who.partition(" ")
        for j, v in values:
            if j == i:
                found[(a, b)] = v
    if not found:
        return f"<p>{date_of(ch.days[i])}: no pair measured.</p>"
    median = float(np.median(list(found.values())))
    names = sorted({n for ab in found for n in ab})
    head = f"<p><b>{date_of(ch.days[i])}</b> (check {ch.entries[i].id}), median {esc(figure(median, unit))}</p>"
    if len(names) > HEATMAP_NODES:
        worst = sorted((v, a, b) for (a, b), v in found.items())[:WORST_NODES]
        return (
            head
            + f"<p>{len(names)} nodes, more than a map of {HEATMAP_NODES} shows: the slowest pairs.</p><table>"
            + "".join(
                f'<tr><td>{esc(a)} – {esc(b)}</td><td class="n">{esc(figure(v, unit))}</td></tr>' for v, a, b in worst
            )
            + "</table>"
        )
    where = {n: k for k, n in enumerate(names)}
    cells: dict[tuple[int, int], float] = {}
    for (a, b), v in found.items():
        cells[(where[a], where[b])] = cells[(where[b], where[a])] = v
    return head + heatmap(names, cells, unit, median, title)


# --------------------------------------------------------------------------- the feed


def feed(clusters: list[Cluster]) -> bytes:
    """Atom (RFC 4287): an entry per regressed night, newest first, the newest FEED_ENTRIES."""
    found = regressions(clusters)[:FEED_ENTRIES]
    stamp = [atom_time(c.nights[i].day) for c, i, _ in found]
    newest = max((n.day for c in clusters for n in c.nights), default=0.0)
    entries = []
    for (c, i, keys), when in zip(found, stamp):
        n = c.nights[i]
        ident = uuid.UUID(
            bytes=hashlib.sha256(f"{c.name}\x00{n.run}\x00{n.when}".encode("utf-8", "replace")).digest()[:16], version=5
        )
        entries.append(
            "<entry>"
            f"<title>{esc(c.name)}: {n.date} run {n.run} {worst_words(c, i, keys)}</title>"
            f'<link rel="alternate" type="text/html" href="{slug("cluster", c.name)}"/>'
            f"<id>urn:uuid:{ident}</id><updated>{when}</updated>"
            f"<summary>{regression_words(c, i, keys)}</summary>"
            "</entry>"
        )
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<feed xmlns="http://www.w3.org/2005/Atom">'
        "<title>bench: regressions</title>"
        '<link rel="alternate" type="text/html" href="index.html"/>'
        f"<id>urn:uuid:{uuid.UUID(bytes=hashlib.sha256(b'bench dashboard feed').digest()[:16], version=5)}</id>"
        f"<updated>{atom_time(max((c.nights[i].day for c, i, _ in found), default=newest))}</updated>"
        "<author><name>bench</name></author>" + "".join(entries) + "</feed>\n"
    ).encode()


def worst_words(c: Cluster, i: int, found: list[Series]) -> str:
    """'slower, 3 keys': the worst verdict of a regressed night's keys, and how many; 'failed'
    for a night the gate failed whole."""
    if not found:
        return "failed"
    worst = min((CODES[int(s.verdict[s.at == i][0])] for s in found), key=rank)
    return f"{SHOWN[worst][0]}, {len(found)} key{'s' if len(found) != 1 else ''}"


def atom_time(day: float) -> str:
    import datetime as dt

    return (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=round(day * 86400))).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- the site


def pages(clusters: list[Cluster]) -> Iterator[tuple[str, Callable[[], bytes]]]:
    """(file name, what writes it) of every file of the site."""
    keys: dict[KeyPage, list[tuple[Cluster, Series]]] = {}
    for c in clusters:
        for s in c.series:
            keys.setdefault(key_page(s), []).append((c, s))
    yield "index.html", lambda: index(clusters, keys)
    yield "feed.xml", lambda: feed(clusters)
    for c in clusters:
        yield slug("cluster", c.name), lambda c=c: cluster_page(c)  # type: ignore[misc]
        yield slug("nodes", c.name), lambda c=c: nodes_page(c)  # type: ignore[misc]
    for k, members in keys.items():
        yield k.file, lambda k=k, m=members: across_page(k, m)  # type: ignore[misc]


def build(clusters: list[Cluster], out: Path) -> dict[str, int]:
    """Write the site to `out` whole (sitedir.replace); each file's size."""
    return sitedir.replace(out, pages(clusters))
