"""`bench dashboard`: a history as a static site, read in a real browser (Debian's chromium,
tests/browser.py). The history is judged_history (real local runs, the fourth night at half rate
and failed by the gate) and, for every verdict the index can show, more clusters whose nights are
that real night's stored rows again under another cluster, date and verdict; node checks whose
drain lists change; and, apart, names and keys written into the history as hostile as they come.
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import bench

from harness.analysis import overview, store
from harness.analysis.compare import FAILED, FASTER, SAME, SLOWER, UNJUDGED
from harness.analysis.sides import KEYS
from harness.present import dashboard, sitedir
from harness.present.charts import figure

ATOM = "{http://www.w3.org/2005/Atom}"
HOSTILE = '<script>alert("x")</script> \' " & \x01\x1b[31m'
LONG = "n" * 10_000


def night_like(con, template: int, cluster: str, created: str, by_group: dict[str, str], gate: str) -> int:
    """Run `template`'s stored rows again as a night of `cluster` on `created`, each key's verdict
    its group's in `by_group` (the figure made to fit: none when failed, half the baseline when
    slower, 1.5 times faster), and the gate's verdict `gate`."""
    cols = [d[0] for d in con.execute("SELECT * FROM runs WHERE id = ?", (template,)).description]
    run = dict(zip(cols, con.execute("SELECT * FROM runs WHERE id = ?", (template,)).fetchone()))
    run.update(fingerprint=f"{cluster}/{created}", cluster=cluster, created=created, label=f"{cluster} night")
    del run["id"]
    (new,) = con.execute(
        f"INSERT INTO runs ({', '.join(run)}) VALUES ({', '.join('?' * len(run))}) RETURNING id", tuple(run.values())
    ).fetchone()
    con.execute(
        "INSERT INTO gate_runs (run_id, verdict, status, baseline) VALUES (?, ?, ?, 'median:3')",
        (new, gate, {"passed": 0, "failed": 1}.get(gate, 3)),
    )
    for metric, key, base, low, high in con.execute(
        "SELECT metric, key, baseline, low, high FROM gate_bands WHERE run_id = ?", (template,)
    ).fetchall():
        verdict = by_group[overview.group_of(dict(zip(KEYS, json.loads(key))))]
        value = {FAILED: None, SLOWER: base / 2, FASTER: base * 1.5}.get(verdict, base)
        con.execute(
            "INSERT INTO gate_bands VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
            (new, metric, key, base, low, high, value, verdict, "between runs"),
        )
    return new


def node_check(con, cluster: str, created: str, named: str, figures: list[tuple[str, str, float]]) -> None:
    (new,) = con.execute(
        "INSERT INTO node_checks (fingerprint, cluster, label, path, created, added, nodes, named) "
        "VALUES (?, ?, NULL, '/checks', ?, ?, 4, ?) RETURNING id",
        (f"{cluster}/{created}", cluster, created, created.replace("T", " ")[:19], named),
    ).fetchone()
    con.executemany("INSERT INTO node_figures VALUES (?, ?, ?, ?)", [(new, *f) for f in figures])


MEDIUM, TRAINING = overview.GROUPS[1], overview.GROUPS[3]
# cluster -> its nights (date, verdict of the medium collectives, of training, the gate's)
CLUSTERS = {
    "steady": [(f"2026-11-0{d}", SAME, SAME, "passed") for d in (2, 3, 4)],
    "quicker": [("2026-11-03", SAME, SAME, "passed"), ("2026-11-04", FASTER, FASTER, "passed")],
    "broken": [("2026-11-03", SAME, SAME, "passed"), ("2026-11-05", UNJUDGED, FAILED, "failed")],
}
FIGURES = [
    ("node n1", "busbw_gbps", 1.0),
    ("node n2", "busbw_gbps", 0.9),
    ("node n3", "busbw_gbps", 0.2),
    ("node n4", "busbw_gbps", 1.1),
    ("pair n1 n2", "busbw_gbps", 1.0),
    ("pair n3 n4", "busbw_gbps", 0.2),
    ("pair n1 n3", "busbw_gbps", 0.25),
    ("pair n2 n4", "busbw_gbps", 0.95),
]


@pytest.fixture(scope="module")
def fleet(judged_history, tmp_path_factory) -> Path:
    """judged_history and three clusters more, and node checks of cluster steady: clean, then
    naming n2 and n3, then n3 alone."""
    db = tmp_path_factory.mktemp("fleet") / "history.sqlite"
    shutil.copy(judged_history, db)
    with store.session(db) as con, con.transaction():
        for name, nights in CLUSTERS.items():
            for date, medium, training, gate in nights:
                by_group = dict.fromkeys(overview.GROUPS, SAME) | {MEDIUM: medium, TRAINING: training}
                night_like(con, 4, name, f"{date}T02:00:00+00:00", by_group, gate)
        node_check(con, "steady", "2026-11-02T03:00:00+00:00", "", FIGURES)
        node_check(con, "steady", "2026-11-03T03:00:00+00:00", "drain n[2-3]", FIGURES)
        node_check(con, "steady", "2026-11-04T03:00:00+00:00", "drain n3; link n1-n3", FIGURES)
    return db


@pytest.fixture(scope="module")
def site(fleet, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "dashboard"
    r = bench("dashboard", "--db", str(fleet), "--out", str(out))
    assert r.returncode == 0, r.describe()
    assert f"open {out / 'index.html'}" in r.stdout
    return out


class Tags(html.parser.HTMLParser):
    """Every start tag of a page with its attributes, and its text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parsed(path: Path) -> Tags:
    t = Tags()
    t.feed(path.read_text())
    t.close()
    return t


def links(path: Path) -> list[str]:
    return [a["href"] for tag, a in parsed(path).tags if tag in ("a", "link") and a.get("href")]


def test_the_index_gives_each_cluster_and_group_its_verdict_worst_first(site):
    rows = index_rows((site / "index.html").read_text())
    # broken: a key failed, another cannot be judged; steady: its node check failed; lab: slower
    assert [r[0] for r in rows] == ["broken", "steady", "lab", "quicker"]
    by = dict(rows)
    # lab's night 4, judged at half rate: slower; its node check of 2 nodes cannot be judged
    assert by["lab"][MEDIUM] == ("slower", "2026-11-04")
    assert by["lab"][TRAINING] == ("slower", "2026-11-04")
    assert by["lab"][overview.NODE_GROUP][0] == "cannot judge"
    assert by["broken"][MEDIUM] == ("cannot judge", "2026-11-05")
    assert by["broken"][TRAINING] == ("failed", "2026-11-05")
    assert by["quicker"][MEDIUM] == ("faster", "2026-11-04")
    assert by["steady"][MEDIUM] == ("unchanged", "2026-11-04")
    assert by["steady"][overview.NODE_GROUP] == ("failed", "2026-11-04")
    for name in CLUSTERS:  # no key of these groups in the runs
        for g in (overview.GROUPS[0], overview.GROUPS[2], overview.GROUPS[4]):
            assert by[name][g] == ("none", ""), (name, g)


def index_rows(text: str) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """(cluster, {group: (verdict, date)}) of the index's matrix, in its order."""

    class Matrix(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows: list[list[list[str]]] = []
            self.inside = False

        def handle_starttag(self, tag, attrs):
            if tag == "table" and ("class", "matrix") in attrs:
                self.inside = True
            elif self.inside and tag == "tr":
                self.rows.append([])
            elif self.inside and tag in ("td", "th") and self.rows:
                self.rows[-1].append([])

        def handle_endtag(self, tag):
            if tag == "table":
                self.inside = False

        def handle_data(self, data):
            if self.inside and self.rows and self.rows[-1] and data.strip():
                self.rows[-1][-1].append(data.strip())

    m = Matrix()
    m.feed(text)
    head, *body = m.rows
    assert [c[0] for c in head] == ["cluster", *overview.GROUPS]
    return [(r[0][0], {g: (c[0], c[1] if len(c) > 1 else "") for g, c in zip(overview.GROUPS, r[1:])}) for r in body]


def test_a_cluster_page_draws_every_key_with_its_band_and_marks(site, fleet):
    clusters = {c.name: c for c in overview.read(store.Location(str(fleet)))}
    lab = clusters["lab"]
    page = site / dashboard.slug("cluster", "lab")
    tags = parsed(page)
    charts = [a for t, a in tags.tags if t == "svg" and a.get("class") == "chart"]
    assert len(charts) == len(lab.series) == 5  # 3 all-reduce sizes, 2 training keys
    # judged_history's stored change point, of run 4 (the fourth night), and none of another cluster
    assert [(c.metric, c.key, c.at, c.change) for c in lab.changes] == [("busbw_gbps", "all_reduce 2x1", 3, -0.5)]
    assert all(not c.changes for name, c in clusters.items() if name != "lab")
    # nights 1-3, never judged, drawn from their stored summaries: the figures the gate took as
    # night 4's baseline (the median of the three, alike)
    for s in lab.series:
        assert s.at.tolist() == [0, 1, 2, 3] and list(s.verdict[:3]) == [overview.CODES.index("not judged")] * 3
        assert s.value[:3] == pytest.approx([s.low[3]] * 3, rel=1e-6), s.text
    paths = [a for t, a in tags.tags if t == "path"]
    assert sum(a["class"] == "gate" for a in paths) == 5  # night 4 failed, under every key
    assert sum(a["class"] == "bad" for a in paths) == 5  # and every key slower on it
    text = "".join(tags.text)
    one_m = next(s for s in lab.series if s.key["size_bytes"] == 1 << 20)  # at half of nights 1-3's busbw
    assert one_m.value[-1] == pytest.approx(one_m.low[-1] / 2, rel=0.01)
    band = f"{figure(one_m.low[-1], 'GB/s')} to {figure(one_m.high[-1], 'GB/s')}"
    # three alike nights draw a band of no width: what it catches is the threshold's 5%
    assert f"slower on 2026-11-04: {figure(one_m.value[-1], 'GB/s')}, band {band}, catches a fall ≥ 5%" in text
    across = "".join(parsed(site / dashboard.key_page(one_m).file).text)  # the key across clusters
    assert "catches a fall ≥ 5%" in across, across
    # the efficiency of 2 GPUs against 1, weak scaling: images/s per GPU over one GPU's
    rate = {s.key["nodes"]: s.value[-1] for s in lab.series if s.metric == "images_per_s"}
    assert f"synthetic weak, torchrun, default2{rate[2] / 2 / rate[1]:.1%}none" in text
    for target in links(page):
        assert (site / target.split("#")[0]).is_file(), target


def test_the_node_page_lists_the_drain_with_the_night_each_node_was_first_named(site):
    tags = parsed(site / dashboard.slug("nodes", "steady"))
    text = " ".join(tags.text)
    # n3 named on 3 and 4 November: first named on the 3rd, in 2 checks; n2, named on the 3rd only, is not
    assert "Drain list node first named checks since n3 2026-11-03 2" in " ".join(text.split())
    assert sum(t == "svg" and a.get("class") == "heat" for t, a in tags.tags) == 2  # the newest and the one before
    cells = [a for t, a in tags.tags if t == "rect"]
    assert len(cells) == 2 * 8  # four pairs, both ways, in each map
    assert "rgb(255,255,255)" in {a["fill"] for a in cells} and "rgb(255,0,0)" in {a["fill"] for a in cells}


def test_the_feed_has_an_entry_per_regressed_night_newest_first(site):
    feed = ET.parse(site / "feed.xml").getroot()
    entries = feed.findall(f"{ATOM}entry")
    titles = [e.findtext(f"{ATOM}title") for e in entries]
    assert titles == ["broken: 2026-11-05 run 11 failed, 2 keys", "lab: 2026-11-04 run 4 slower, 5 keys"]
    assert feed.findtext(f"{ATOM}updated") == "2026-11-05T02:00:00Z"
    assert len({e.findtext(f"{ATOM}id") for e in entries}) == 2
    for e in entries:
        assert e.find(f"{ATOM}link").get("href").startswith("cluster-")


def test_the_same_history_gives_the_same_bytes(fleet, site, tmp_path):
    again = tmp_path / "again"
    bench("dashboard", "--db", str(fleet), "--out", str(again))
    assert sorted(os.listdir(again)) == sorted(os.listdir(site))
    for name in os.listdir(site):
        assert (again / name).read_bytes() == (site / name).read_bytes(), name


def test_a_postgresql_history_gives_the_same_site(fleet, site, postgres, tmp_path):
    url = postgres.new_database("dashboard")
    bench("history", "migrate", "--db", url)
    bench("history", "copy", str(fleet), url)
    out = tmp_path / "from-postgresql"
    bench("dashboard", "--db", url, "--out", str(out))
    for name in os.listdir(site):
        assert (out / name).read_bytes() == (site / name).read_bytes(), name


def test_the_browser_shows_every_cluster_and_key_and_asks_the_network_for_nothing(site, fleet, tmp_path, browser):
    """Opened from file:// in chromium: the matrix as the DOM has it, every cluster page's charts,
    every key page; and no request but for the site's own files. Screenshots beside the test."""
    clusters = overview.read(store.Location(str(fleet)))
    browser.open((site / "index.html").as_uri())
    cells = browser.evaluate(
        "[...document.querySelectorAll('table.matrix tr')].slice(1).map(r => [...r.children].map(c => c.innerText))"
    )
    assert {r[0]: r[1:] for r in cells}["broken"][3] == "failed\n2026-11-05"
    browser.screenshot(tmp_path / "index.png")
    for c in clusters:
        browser.open((site / dashboard.slug("cluster", c.name)).as_uri())
        assert browser.evaluate("document.querySelector('h1').innerText") == c.name
        assert browser.evaluate("document.querySelectorAll('svg.chart').length") == len(c.series)
        keys = browser.evaluate("[...document.querySelectorAll('h3.key')].map(h => h.innerText)")
        assert sorted(keys) == sorted(f"{s.text} · {dashboard.metric_words(s.metric)}" for s in c.series)
    browser.screenshot(tmp_path / "cluster.png")
    pages = {dashboard.key_page(s).file for c in clusters for s in c.series}
    for name in sorted(pages):
        browser.open((site / name).as_uri())
        assert browser.evaluate("document.querySelectorAll('svg.chart').length") >= 1
    asked = browser.requests()
    assert all(u.startswith(site.as_uri() + "/") for u in asked), [u for u in asked if not u.startswith("file:")]
    assert len(asked) == 1 + len(clusters) + len(pages)
    from PIL import Image

    for shot in ("index.png", "cluster.png"):
        with Image.open(tmp_path / shot) as im:
            assert im.width >= 800 and len(im.convert("RGB").getcolors(1 << 16) or range(1 << 16)) > 8
    print(f"screenshots: {tmp_path / 'index.png'} {tmp_path / 'cluster.png'}")


REFRESH = '<meta http-equiv="refresh" content="0;url=https://198.18.0.9/">'


@pytest.fixture(scope="module")
def hostile(judged_history, tmp_path_factory) -> tuple[Path, Path]:
    """A history whose every text is hostile: cluster names, labels, keys, reasons, node names,
    change points, as another tool or a damaged copy could have written them."""
    db = tmp_path_factory.mktemp("hostile") / "history.sqlite"
    shutil.copy(judged_history, db)
    with store.session(db) as con, con.transaction():
        for name in (HOSTILE, LONG):
            new = night_like(
                con, 4, name, "2026-11-05T02:00:00+00:00", dict.fromkeys(overview.GROUPS, SLOWER), "failed"
            )
            con.execute("UPDATE runs SET label = ? WHERE id = ?", (HOSTILE, new))
            con.execute("UPDATE gate_runs SET accepted = ?, reason = ? WHERE run_id = ?", (HOSTILE, HOSTILE, new))
            key = json.dumps(["synthetic", "", "", HOSTILE, 1, 1, HOSTILE, HOSTILE, 0])
            con.execute(
                "INSERT INTO gate_bands VALUES (?, 'images_per_s', ?, 1, 0.9, 1.1, 0.5, 'slower', 'between runs', "
                "NULL)",
                (new, key),
            )
            con.execute(
                "INSERT INTO change_points VALUES (?, 'runs', NULL, 'images_per_s', ?, ?, NULL, 1, 0.5, -0.5, 0.01, "
                "'E-divisive means', 499, 0.05, 3, 0.05, '2026-11-06')",
                (name, f"synthetic {HOSTILE}, 1x1, {HOSTILE}, {HOSTILE}", new),
            )
            node_check(
                con,
                name,
                "2026-11-05T03:00:00+00:00",
                f"drain {HOSTILE}; link {HOSTILE}",
                [(f"node {HOSTILE}", "busbw_gbps", 0.5), (f"pair {HOSTILE} {LONG}", "busbw_gbps", 0.5)],
            )
            # a check's node count is a column SQLite does not type: a tag that would send the page away
            con.execute("UPDATE node_checks SET nodes = ? WHERE cluster = ?", (REFRESH, name))
        # times past datetime's range once in UTC (they were exit 70, and no site at all)
        for created in ("9999-12-31T23:00:00-05:00", "0001-01-01T00:30:00+01:00"):
            night_like(con, 4, HOSTILE, created, dict.fromkeys(overview.GROUPS, SAME), "passed")
    out = tmp_path_factory.mktemp("hostile-site") / "site"
    r = bench("dashboard", "--db", str(db), "--out", str(out))
    assert r.returncode == 0, r.describe()
    return db, out


def test_hostile_texts_come_out_escaped_in_every_page_and_the_feed(hostile):
    _, out = hostile
    pages = sorted(out.glob("*.html"))
    assert len(pages) == 1 + 2 * 3 + 6  # index, the lab's and the two hostile clusters' pages, key pages
    shown = HOSTILE.replace("\x01", "\\x01").replace("\x1b", "\\x1b")
    for page in pages:
        raw = page.read_text()
        assert "<script" not in raw and "\x01" not in raw and "\x1b" not in raw, page.name
        assert REFRESH not in raw and raw.count("<meta") == 3, page.name  # charset, viewport, the CSP
        tags = parsed(page)
        for tag, attrs in tags.tags:
            assert tag != "script", page.name
            assert not any(a.startswith("on") for a in attrs), (page.name, tag, attrs)
        if page.name != "index.html" and "lab" not in page.name:
            assert shown in "".join(tags.text) or f"{LONG[:160]}… (10,000 characters)" in "".join(tags.text), page.name
    assert max(len(p.read_bytes()) for p in pages) < 200_000  # a 10 KB name is shown cut, not ten times over
    feed = ET.parse(out / "feed.xml").getroot()  # control characters would make it no XML at all
    titles = [e.findtext(f"{ATOM}title") for e in feed.findall(f"{ATOM}entry")]
    assert f"{shown}: 2026-11-05 run 5 slower, 6 keys" in titles
    assert any(t.startswith(f"{LONG[:160]}… (10,000 characters)") for t in titles)


def test_hostile_texts_run_nothing_in_the_browser(hostile, browser):
    _, out = hostile
    for name in (dashboard.slug("cluster", HOSTILE), dashboard.slug("nodes", HOSTILE), "index.html"):
        browser.open((out / name).as_uri())
        assert browser.evaluate("document.scripts.length") == 0
        assert HOSTILE.replace("\x01", "\\x01").replace("\x1b", "\\x1b") in browser.evaluate("document.body.innerText")


def test_a_directory_not_a_dashboard_is_refused_and_kept(fleet, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    r = bench("dashboard", "--db", str(fleet), "--out", str(mine), check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "is not a dashboard bench wrote" in r.stderr, r.stderr
    assert os.listdir(mine) == ["notes.txt"]
    file = tmp_path / "file"
    file.write_text("x")
    r = bench("dashboard", "--db", str(fleet), "--out", str(file), check=False)
    assert r.returncode == 2 and "is a file" in r.stderr and file.read_text() == "x"
    r = bench("dashboard", "--db", str(tmp_path / "none.sqlite"), "--out", str(tmp_path / "new"), check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.describe()
    assert not (tmp_path / "new").exists()
    assert sorted(os.listdir(tmp_path)) == ["file", "mine"]  # nothing left beside them
    # a marker planted empty, or as a link to a site's, or a site with a file of someone else's
    # in it: each kept whole; and --out a link to a site: refused, the link and the site kept
    site = tmp_path / "site"
    bench("dashboard", "--db", str(fleet), "--out", str(site))
    planted = {"empty": (lambda d: (d / sitedir.MARKER).write_bytes(b""), "no .bench-dashboard of bench's"),
               "linked": (lambda d: (d / sitedir.MARKER).symlink_to(site / sitedir.MARKER), "of bench's"),
               "beside": (lambda d: shutil.copytree(site, d, dirs_exist_ok=True), "holds 'notes.txt'")}  # fmt: skip
    for name, (plant, words) in planted.items():
        victim = tmp_path / name
        victim.mkdir()
        (victim / "notes.txt").write_text("mine")
        plant(victim)
        before = sorted(os.listdir(victim))
        r = bench("dashboard", "--db", str(fleet), "--out", str(victim), check=False)
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, (name, r.describe())
        assert sorted(os.listdir(victim)) == before and (victim / "notes.txt").read_text() == "mine"
    link = tmp_path / "link"
    link.symlink_to(site)
    r = bench("dashboard", "--db", str(fleet), "--out", str(link), check=False)
    assert r.returncode == 2 and "is a link" in r.stderr, r.describe()
    assert link.is_symlink() and (site / sitedir.MARKER).is_file()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no .NAME.PID.old or .new left


def test_a_site_is_replaced_whole_with_the_umask_honoured(fleet, tmp_path):
    out = tmp_path / "site"
    bench("dashboard", "--db", str(fleet), "--out", str(out))
    (out / "stale.html").write_text("from before")
    old = os.umask(0o027)
    try:
        r = bench("dashboard", "--db", str(fleet), "--out", str(out))
    finally:
        os.umask(old)
    assert r.returncode == 0, r.describe()
    assert not (out / "stale.html").exists()
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert {stat.S_IMODE((out / n).stat().st_mode) for n in os.listdir(out)} == {0o640}
    assert sorted(os.listdir(tmp_path)) == ["site"]
