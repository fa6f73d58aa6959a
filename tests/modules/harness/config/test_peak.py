"""Expected figures (docs/concepts/expected.md): busbw as a % of the peak a cluster profile states, checked
against a hand computation; and `bench regress --baseline reference`, which judges a run
against the profile's reference figures without any history."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import pandas as pd
import pytest
from conftest import bench
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.catalog import COLLECTIVES, ROOT, alltoallv_units, share
from harness.config.cluster_profile import Hardware, load_profile
from harness.config.fields import FieldError
from harness.config.peak import POINT_TO_POINT, heaviest
from harness.nodes.verdict import expected

# 8 NDR400 NICs per node at 50 GB/s, NVLink at 450 GB/s per GPU (docs/concepts/expected.md)
H100 = Hardware(network_gbps_per_node=400, nics_per_node=8, intra_node_gbps_per_gpu=450)
# 8 HDR200 NICs at 25 GB/s, NVLink 3 at 300 GB/s per GPU
A100 = Hardware(network_gbps_per_node=200, nics_per_node=8, intra_node_gbps_per_gpu=300)
# one HDR200 NIC for the node's 8 GPUs
ONE_NIC = Hardware(network_gbps_per_node=25, nics_per_node=1, intra_node_gbps_per_gpu=300)


@pytest.mark.parametrize(
    ("hw", "nodes", "gpus", "group", "collective", "peak"),
    [
        # rings across nodes: a channel per NIC, each hop carrying 2(n-1)/n x S / 8, so busbw =
        # 8 NICs x 50 = 400, under NVLink's 450; published 370-450 GB/s for 2+ nodes of 8 H100
        (H100, 2, 8, "world", "all_reduce", 400.0),
        (H100, 8, 8, "world", "all_gather", 400.0),
        (H100, 64, 8, "world", "reduce_scatter", 400.0),
        (H100, 2, 8, "world", "broadcast", 400.0),
        # 8 x 25 = 200 under NVLink 3's 300; published 185-190 GB/s on 8 x HDR200 clouds
        (A100, 2, 8, "world", "all_reduce", 200.0),
        # 4 GPUs reach the 4 NICs next to them: 4 x 50
        (H100, 4, 4, "world", "all_reduce", 200.0),
        # one GPU per node reaches one NIC: 46-48 GB/s published per NDR400 NIC
        (H100, 16, 1, "world", "all_reduce", 50.0),
        # one rank per node, every rail at once: each its own NIC
        (H100, 2, 8, "inter", "all_reduce", 50.0),
        # one NIC shared by 8 GPUs: the ring gets the whole NIC, one rank per node an eighth
        (ONE_NIC, 2, 8, "world", "all_reduce", 25.0),
        (ONE_NIC, 2, 8, "inter", "all_reduce", 3.125),
        # inside one node, every collective on NVLink
        (H100, 1, 8, "world", "all_reduce", 450.0),
        (H100, 2, 8, "intra", "all_reduce", 450.0),
        (H100, 1, 8, "world", "all_to_all", 450.0),
        # all_to_all over 2 x 8: each rank sends S/16 to each of 8 ranks on the other node, S/2
        # through its NIC at 50 GB/s, in S/2 / 50 s; busbw = (15/16) x S / t = 15/16 x 100
        (H100, 2, 8, "world", "all_to_all", 93.75),
        # over 64 x 8 ranks: 504/512 of S off the node, busbw = (511/512) / (504/512) x 50
        (H100, 64, 8, "world", "all_to_all", 511 / 504 * 50),
        # gather at rank 0 of 2 x 8: the root takes 8 x S/16 through its NIC, as all_to_all
        (H100, 2, 8, "world", "gather", 93.75),
        (H100, 2, 8, "world", "scatter", 93.75),
        # sendrecv: the last rank of a node sends all of S through its NIC, busbw = 1 x 50
        (H100, 2, 8, "world", "sendrecv", 50.0),
        (H100, 2, 8, "inter", "sendrecv", 50.0),
        # alltoallv over 2 x 1: rank 0 sends 2 of 3 units to rank 1 and rank 1 receives them;
        # bus factor 1 - 1/3, t = (2/3) S / 50: busbw = (2/3) / (2/3) x 50
        (H100, 2, 1, "world", "alltoallv", 50.0),
        (H100, 1, 1, "world", "all_reduce", None),  # one rank moves nothing over a link
    ],
)
def test_peak_by_hand(hw, nodes, gpus, group, collective, peak):
    assert hw.peak_busbw_gbps(nodes, gpus, group, collective) == pytest.approx(peak)


# The share of S that rank src sends rank dst, src != dst, as benchmarks/catalog.py lays out each
# point-to-point collective's buffers: the reference the closed forms of harness/config/peak.py
# are held to.
SENT = {
    "all_to_all": lambda src, dst, n: 1 / n,
    "alltoallv": lambda src, dst, n: share(src, dst, n) / alltoallv_units(n),
    "gather": lambda src, dst, n: 1 / n if dst == ROOT else 0.0,
    "scatter": lambda src, dst, n: 1 / n if src == ROOT else 0.0,
    "sendrecv": lambda src, dst, n: 1.0 if dst == (src + 1) % n else 0.0,
}


def pairwise(name, ranks, per_node):
    """Every pair's share added up, rank by rank, sent and received, off the node and on it: the
    busiest rank's (off, on)."""
    off_out, off_in, on_out, on_in = ([0.0] * ranks for _ in range(4))
    for src in range(ranks):
        for dst in range(ranks):
            if src != dst:
                part = SENT[name](src, dst, ranks)
                out, into = (on_out, on_in) if src // per_node == dst // per_node else (off_out, off_in)
                out[src] += part
                into[dst] += part
    return max(off_out + off_in), max(on_out + on_in)


def test_the_reference_covers_every_point_to_point_collective():
    assert set(SENT) == set(POINT_TO_POINT)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(SENT)), ranks=st.integers(2, 300), per_node=st.integers(1, 320))
def test_the_closed_form_is_the_pairwise_sum(name, ranks, per_node):
    """Any count of ranks and ranks per node, the last node full or not."""
    assert heaviest(name, ranks, per_node) == pytest.approx(pairwise(name, ranks, per_node), rel=1e-12, abs=1e-12)


# Worked by hand at 1,024 and 2,048 nodes of 8 (and 1,024 of 16), with U = n(n+1)/2 alltoallv's
# units. all_to_all and gather: the root, or a rank, sends or takes S/n to or from each rank off
# its node, and each of 7 on it. alltoallv: rank 0 sends 1 + k units to rank k, and ranks 8 to
# n-1 are off its node, so 9 + 10 + ... + n = U - 36 of them; rank 7 sends rank 7 - k (k = 1..7)
# 1 + n - k units, 7(n + 1) - 28 in all, on its node. With 16 a node: U - 136 and 15(n + 1) - 120.
@pytest.mark.parametrize(
    ("name", "ranks", "per_node", "off", "on"),
    [
        ("all_to_all", 8192, 8, Fraction(8184, 8192), Fraction(7, 8192)),
        ("gather", 8192, 8, Fraction(8184, 8192), Fraction(7, 8192)),
        ("scatter", 16384, 8, Fraction(16376, 16384), Fraction(7, 16384)),
        ("sendrecv", 8192, 8, 1, 1),
        ("sendrecv", 8192, 1, 1, 0),
        ("alltoallv", 8192, 8, Fraction(33_558_528 - 36, 33_558_528), Fraction(7 * 8193 - 28, 33_558_528)),
        ("alltoallv", 16384, 8, Fraction(134_225_920 - 36, 134_225_920), Fraction(7 * 16385 - 28, 134_225_920)),
        ("alltoallv", 16384, 16, Fraction(134_225_920 - 136, 134_225_920), Fraction(15 * 16385 - 120, 134_225_920)),
    ],
)
def test_the_closed_form_by_hand_at_thousands_of_ranks(name, ranks, per_node, off, on):
    assert heaviest(name, ranks, per_node) == pytest.approx((float(off), float(on)), rel=1e-12)


def test_the_peak_at_1024_nodes_of_8_by_hand():
    # all_to_all: bus factor 8191/8192 over 8184/8192 of S through a rank's 50 GB/s NIC share
    assert H100.peak_busbw_gbps(1024, 8, "world", "all_to_all") == pytest.approx(8191 / 8184 * 50, rel=1e-12)
    # sendrecv: all of S through the NIC share, bus factor 1
    assert H100.peak_busbw_gbps(1024, 8, "world", "sendrecv") == pytest.approx(50, rel=1e-12)


def test_the_peak_is_modelled_for_every_collective():
    for name in COLLECTIVES:
        assert H100.peak_busbw_gbps(2, 8, "world", name) is not None, name


def test_a_figure_not_stated_gives_no_peak():
    assert Hardware(intra_node_gbps_per_gpu=450).peak_busbw_gbps(2, 8) is None
    assert Hardware(network_gbps_per_node=400, nics_per_node=8).peak_busbw_gbps(1, 8) is None
    # the network without NVLink: the rings' bound is the network's alone
    assert Hardware(network_gbps_per_node=400, nics_per_node=8).peak_busbw_gbps(2, 8) == 400


def test_the_network_needs_its_nic_count():
    with pytest.raises(FieldError, match="nics_per_node"):
        Hardware(network_gbps_per_node=400)
    with pytest.raises(FieldError, match="nics_per_node"):
        Hardware(nics_per_node=8)
    with pytest.raises(FieldError, match="whole number of NICs"):
        Hardware(network_gbps_per_node=400, nics_per_node=0)


def test_the_node_check_judges_each_step_against_its_own_peak(tmp_path):
    """bench nodes' hardware rule (docs/guides/nodes.md): a pair's all-reduce of 2 x 8 H100 against the
    rings over 8 NICs (400 GB/s, not a GPU's share, 50, which passed a pair at an eighth of its
    links), its exchange against each rank's NIC (50), the node's all-reduce against NVLink."""
    (tmp_path / "p.yaml").write_text(
        "name: h100\nhardware: {network_gbps_per_node: 400, nics_per_node: 8, intra_node_gbps_per_gpu: 450,"
        " peak_tflops_per_gpu: 989}\n"
    )
    profile = load_profile(tmp_path / "p.yaml")
    assert expected(profile, 8) == {"gemm_tflops": 989, "intra_busbw_gbps": 450, "busbw_gbps": 400, "p2p_gbps": 50}
    # one GPU per node: the pair's all-reduce and exchange both on the one NIC next to it
    assert expected(profile, 1) == {"gemm_tflops": 989, "intra_busbw_gbps": None, "busbw_gbps": 50, "p2p_gbps": 50}


@pytest.fixture
def run(mixed_run):
    """A real local run of 1 and 2 emulated nodes of 2 gloo ranks (tests/conftest.py), whose plan
    each test gives the cluster profile a Slurm run would record."""
    return mixed_run[0]


def _with_profile(run, tmp_path, text: str):
    """A copy of `run` whose plan.json records the profile `text`, as the Slurm executor writes it."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (tmp_path / "p.yaml").write_text(text)
    plan = json.loads((copy / "plan.json").read_text())
    plan["cluster"] = dataclasses.asdict(load_profile(tmp_path / "p.yaml"))
    (copy / "plan.json").write_text(json.dumps(plan))
    bench("collect", str(copy))
    return copy


def test_busbw_as_a_percentage_of_the_stated_peak(run, tmp_path):
    hw = "name: lab\nhardware: {network_gbps_per_node: 2.5, nics_per_node: 2, intra_node_gbps_per_gpu: 4}\n"
    copy = _with_profile(run, tmp_path, hw)
    t = pd.read_csv(copy / "summary.csv")
    coll = t[t["workload"] == "allreduce"]
    peaks = dict(zip(zip(coll["nodes"], coll["group"], coll["collective"]), coll["busbw_peak_gbps"]))
    # by hand, 2 NICs of 1.25 GB/s a node, one next to each of its 2 ranks: an all-reduce over 2
    # nodes runs a ring on each NIC, 2.5; one rank per node has its own NIC, 1.25; inside a node 4.
    # all_to_all over 2 x 2: each rank sends S/4 to each rank of the other node, S/2 through its
    # NIC in 0.4 s a GB (S/4 to its neighbour over the 4 GB/s inside, in less), bus factor 3/4:
    # 0.75 / 0.4 = 1.875. sendrecv: rank 1 sends all of S to rank 2 through its NIC: 1.25.
    assert {k: peaks[k] for k in [(1, "world", "all_reduce"), (2, "world", "all_reduce")]} == {
        (1, "world", "all_reduce"): 4.0,
        (2, "world", "all_reduce"): 2.5,
    }
    assert peaks[(2, "inter", "all_reduce")] == 1.25 and peaks[(2, "intra", "all_reduce")] == 4.0
    assert peaks[(2, "world", "all_to_all")] == pytest.approx(1.875)
    assert peaks[(2, "world", "sendrecv")] == pytest.approx(1.25)
    assert peaks[(2, "world", "gather")] == pytest.approx(1.875)
    pct = 100 * coll["busbw_gbps"] / coll["busbw_peak_gbps"]
    assert coll["busbw_pct_peak"].tolist() == pytest.approx(pct.tolist())
    assert t[t["workload"] != "allreduce"]["busbw_pct_peak"].isna().all()
    bench("plot", str(copy))
    points = pd.read_csv(copy / "plots" / "allreduce_busbw.csv")
    peak_points = points[(points["metric"] == "busbw_peak_gbps") & points["collective"].str.startswith("all_reduce")]
    assert sorted(zip(peak_points["collective"], peak_points["y"])) == [
        ("all_reduce", 2.5),
        ("all_reduce", 4.0),
        ("all_reduce inter", 1.25),
        ("all_reduce intra", 4.0),
    ]
    html = tmp_path / "r.html"
    bench("report", str(copy), "--out", str(html))
    assert "% of peak" in html.read_text()


def test_no_peak_without_stated_hardware(run, tmp_path):
    t = pd.read_csv(run / "summary.csv")
    assert t["busbw_pct_peak"].isna().all() and t["busbw_peak_gbps"].isna().all()
    bench("report", str(run), "--out", str(tmp_path / "r.html"))
    assert "% of peak" not in (tmp_path / "r.html").read_text()


def _reference(run, tmp_path, factor_1, factor_2, extra=""):
    """A profile whose references sit at `factor` x the run's own 256K busbw of 1 and 2 nodes."""
    t = pd.read_csv(run / "summary.csv")
    at = {
        int(n): float(b)
        for n, b in t[(t["collective"] == "all_reduce") & (t["size_bytes"] == 256 * 1024) & (t["group"] == "world")][
            ["nodes", "busbw_gbps"]
        ].values
    }
    return _with_profile(
        run,
        tmp_path,
        "name: lab\nreference:\n"
        f"  - {{workload: allreduce, size: 256K, nodes: 1, busbw_gbps: {at[1] * factor_1!r}, tolerance: 0.2}}\n"
        f"  - {{workload: allreduce, size: 256K, nodes: 2, busbw_gbps: {at[2] * factor_2!r}, tolerance: 0.2}}\n"
        + extra,
    )


def _regress(copy, tmp_path):
    return bench("regress", str(copy), "--baseline", "reference", "--out", str(tmp_path / "rg"), check=False)


def test_a_first_run_meets_its_reference(run, tmp_path):
    copy = _reference(run, tmp_path, 1.0, 0.9)
    r = _regress(copy, tmp_path)
    assert r.returncode == 0, r.describe()
    assert "0 regressions, 0 failed keys, 0 cannot judge, 0 improvements, 2 unchanged of 2 compared" in r.stdout
    junit = (tmp_path / "rg" / "junit.xml").read_text()
    assert "band [0.800, 1.200]" in junit and "<failure" not in junit
    # added to a cluster's history, the verdict is kept as what it is, never as that cluster's pass
    db = tmp_path / "h.sqlite"
    bench("history", "add", str(copy), "--verdict", str(tmp_path / "rg" / "gate.json"), "--create", "--cluster",
          "other", "--db", str(db))  # fmt: skip
    from harness.analysis import history

    assert history.gate_verdicts(db, history.entries(db))[1][0] == "passed against reference figures"


def test_a_first_run_below_its_reference_fails(run, tmp_path):
    copy = _reference(run, tmp_path, 1.0, 2.0)  # the 2-node figure expected twice as high
    r = _regress(copy, tmp_path)
    assert r.returncode == 1 and "1 regression" in r.stderr, r.describe()
    junit = (tmp_path / "rg" / "junit.xml").read_text()
    assert junit.count("<failure") == 1 and "allreduce all_reduce, 2x2" in junit


def test_a_reference_the_run_cannot_answer_is_not_taken_as_met(run, tmp_path):
    copy = _reference(
        run, tmp_path, 1.0, 1.0, "  - {workload: allreduce, size: 256K, nodes: 8, busbw_gbps: 40, tolerance: 0.1}\n"
    )
    r = _regress(copy, tmp_path)
    assert r.returncode == 3 and "1 cannot judge" in r.stderr, r.describe()
    assert "the run has no such key" in (tmp_path / "rg" / "report.md").read_text()


def test_no_reference_block_is_one_line(run, tmp_path):
    copy = _with_profile(run, tmp_path, "name: lab\n")
    r = _regress(copy, tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert "states no reference figures" in r.stderr


def test_a_key_without_a_measurement_is_not_taken_as_met(run, tmp_path):
    """A completed row whose figure is missing (null in its result, NaN in the summary) cannot be
    judged against its reference, as against the history: a gap never passes the gate."""
    copy = _reference(run, tmp_path, 1.0, 1.0)
    result = copy / "jobs" / "n2-g2-torchrun-default" / "allreduce.json"
    data = json.loads(result.read_text())
    row = next(r for r in data["rows"] if r["size_bytes"] == 256 * 1024)
    row.update(time_us=None, algbw_gbps=None, busbw_gbps=None)
    result.write_text(json.dumps(data))
    bench("collect", str(copy))
    r = _regress(copy, tmp_path)
    assert r.returncode == 3 and "1 cannot judge, 0 improvements, 1 unchanged of 2 compared" in r.stderr, r.describe()
    assert "busbw_gbps is nan in run" in (tmp_path / "rg" / "report.md").read_text()
