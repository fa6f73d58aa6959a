"""The NCCL log parser against fixtures in the line formats real NCCL releases print (each
fixture's header names the thread its formats come from, and the NCCL version), and
`bench transport` on them. A fact the log does not state must be None, never a guess."""

from __future__ import annotations

import dataclasses
import json
import socket

import pandas as pd
import pytest
from conftest import ROOT, bench

from benchmarks import links
from harness.evidence import transport

FIXTURES = ROOT / "tests" / "fixtures" / "nccl"

# Every fact of every fixture, as `bench transport --json` must report it.
EXPECTED = {
    "ib-gdrdma-2.5.6.log": {
        "nccl_version": "2.5.6",  # the bare line rank 0 prints, for every rank of the run
        "net_plugin": "internal",
        "net": "IB",  # 2.5 has no "Using network" line: from "via NET/IB/0/GDRDMA"
        "net_devices": ["mlx5_0:1/IB"],
        "link_layer": ["IB"],
        "ib_device_found": True,
        "oob": "ib0",
        "gdr": True,
        "intra_transport": ["P2P/IPC"],
        "nccl_channels": 2,
        "nvls_channels": None,
        "graphs": ["ring", "tree"],
        "algo": None,
        "algorithms": None,
        "warnings": [],
        "hosts": ["gpu-a", "gpu-b"],
        "ranks": 4,
    },
    "roce-2.13.4.log": {
        "nccl_version": "2.13.4",
        "net_plugin": "internal",
        "net": "IB",
        "net_devices": ["mlx5_4:1/RoCE"],
        "link_layer": ["RoCE"],
        "ib_device_found": True,
        "oob": "net1",
        "gdr": False,  # NET channels without /GDRDMA
        "intra_transport": None,
        "nccl_channels": 2,
        "nvls_channels": None,
        "graphs": ["ring", "tree"],
        "algo": None,
        "algorithms": None,
        "warnings": [],
        "hosts": ["roce-1", "roce-2"],
        "ranks": 2,
    },
    "socket-ib-disabled-2.11.4.log": {
        "nccl_version": "2.11.4",
        "net_plugin": "internal",
        "net": "Socket",
        "net_devices": ["enp225s0f1"],
        "link_layer": None,
        "ib_device_found": None,  # IB disabled: NCCL never looked
        "oob": "enp225s0f1",
        "gdr": False,
        "intra_transport": None,
        "nccl_channels": 2,
        "nvls_channels": None,
        "graphs": ["ring", "tree"],
        "algo": None,
        "algorithms": None,
        "warnings": [],
        "hosts": ["gpu01", "gpu02"],
        "ranks": 2,
    },
    "no-ib-device-2.18.5.log": {
        "nccl_version": "2.18.5",
        "net_plugin": "internal",
        "net": "Socket",
        "net_devices": ["eno1"],
        "link_layer": None,
        "ib_device_found": False,
        "oob": "eno1",
        "gdr": False,
        "intra_transport": ["SHM"],
        "nccl_channels": 2,
        "nvls_channels": 0,
        "graphs": ["ring", "tree"],
        "algo": None,
        "algorithms": None,
        "warnings": ["socketFinalizeAccept: wrong type 4 != 3"],
        "hosts": ["ws-1", "ws-2"],
        "ranks": 4,
    },
    "aws-ofi-2.9.9.log": {
        "nccl_version": "2.9.9",
        "net_plugin": "aws-ofi-nccl 1.4.0aws",
        "net": "AWS Libfabric",
        "net_devices": None,  # the plugin names its provider, not devices
        "link_layer": None,
        "ib_device_found": None,
        "oob": "ens32",
        "gdr": True,
        "intra_transport": ["P2P/IPC"],
        "nccl_channels": 2,
        "nvls_channels": None,
        "graphs": ["ring", "tree"],
        "algo": None,
        "algorithms": None,
        "warnings": [],
        "hosts": ["ip-10-216-178-255", "ip-10-216-179-87"],
        "ranks": 4,
    },
    "nvls-cumem-2.24.3.log": {
        "nccl_version": "2.24.3",
        "net_plugin": "NCCL RDMA Plugin v8",
        "net": "IBext_v8",
        "net_devices": [f"ibp{i}:1/IB/SHARP" for i in range(8)],
        "link_layer": ["IB"],
        "ib_device_found": True,
        "oob": "eth0",
        "gdr": None,  # one node: no NET channel, so nothing said about GPUDirect RDMA
        "intra_transport": ["NVLS", "P2P/CUMEM"],
        "nccl_channels": 24,
        "nvls_channels": 16,
        "graphs": ["ring", "tree"],
        "algo": None,
        "algorithms": None,
        "warnings": [],
        "hosts": ["dgx-07"],
        "ranks": 2,
    },
    "ib-gdrdma-2.28.9.log": {
        "nccl_version": "2.28.9",
        "net_plugin": "internal",
        "net": "IB",
        "net_devices": [f"mlx5_{i}:1/IB" for i in range(4)],
        "link_layer": ["IB"],
        "ib_device_found": True,
        "oob": "eth0",
        "gdr": True,
        "intra_transport": None,
        "nccl_channels": 4,
        "nvls_channels": 0,
        "graphs": ["ring"],
        "algo": None,
        "algorithms": ["RING/LL", "RING/SIMPLE"],  # rank 0's TUNING lines
        "warnings": ["NET/IB : mlx5_1:1 Got async event : port error (x2)"],
        "hosts": ["cn76", "cn77"],
        "ranks": 2,
    },
}


def test_every_fixture_is_checked():
    assert sorted(EXPECTED) == sorted(p.name for p in FIXTURES.glob("*.log"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_facts_of_each_fixture(name):
    facts = transport.read_log(FIXTURES / name)
    assert facts.pop("log") == str(FIXTURES / name)
    assert facts == EXPECTED[name]


def test_devices_from_the_per_device_lines_alone(tmp_path):
    """A log whose NET/IB summary line is missing still names the devices from the lines NCCL
    prints for each one (recent releases)."""
    log = tmp_path / "x.log"
    text = (FIXTURES / "ib-gdrdma-2.28.9.log").read_text()
    log.write_text("".join(line for line in text.splitlines(keepends=True) if "NET/IB : Using" not in line))
    facts = transport.read_log(log)
    # only cn76's rank printed the device lines: cn77 has no evidence, so the fact is per host
    assert facts["net_devices"] == [f"mlx5_{i}:1/IB" for i in range(4)]
    assert facts["ib_device_found"] is True and facts["link_layer"] == ["IB"]


def test_ranks_that_disagree_are_named_by_host(tmp_path):
    """One job's per-rank files where one node fell back to sockets: the fact is each value with
    its hosts, not a pick of one."""
    job = tmp_path / "nccl"
    job.mkdir()
    (job / "cn76.155.log").write_text((FIXTURES / "ib-gdrdma-2.28.9.log").read_text())
    (job / "gpu01.1.log").write_text((FIXTURES / "socket-ib-disabled-2.11.4.log").read_text())
    facts = transport.read_log(job)
    assert facts["net"] == {"IB": ["cn76", "cn77"], "Socket": ["gpu01", "gpu02"]}
    assert facts["gdr"] == {"no": ["gpu01", "gpu02"], "yes": ["cn76", "cn77"]}
    assert facts["ranks"] == 4
    assert transport.as_text(facts["net"]) == "IB on cn76,cn77; Socket on gpu01,gpu02"


def test_lines_that_are_not_nccl_say_nothing(tmp_path):
    log = tmp_path / "out.log"
    log.write_text("# nThread 1 nGpus 1 minBytes 8\nUsing network IB\nrank 0: via NET/IB/0/GDRDMA\n")
    facts = transport.read_log(log)
    assert facts["ranks"] == 0 and all(facts[k] is None for k in transport.FACTS)


def test_bench_transport_json_and_text():
    logs = [str(FIXTURES / n) for n in ("roce-2.13.4.log", "no-ib-device-2.18.5.log")]
    out = json.loads(bench("transport", *logs, "--json").stdout)
    assert [o["log"] for o in out] == logs
    assert [o["net"] for o in out] == ["IB", "Socket"]
    assert {"nccl_version", "net", "net_devices", "gdr", "intra_transport", "warnings"} <= set(out[0])
    text = bench("transport", logs[1]).stdout
    assert "net              Socket" in text and "NCCL WARN socketFinalizeAccept" in text
    assert "link_layer       (not in the log)" in text


def test_a_gloo_job_s_log_is_named_as_such(tmp_path):
    """bench's workloads print their backend in their header (benchmarks/allreduce.py, as a local
    job's log.txt holds it): a gloo job's log is said to be one, not asked about NCCL_DEBUG."""
    gloo = tmp_path / "log.txt"
    gloo.write_text(
        "# collective all_reduce  group world  dtype float32  op sum  world size 2  device cpu  backend gloo  "
        "iters 10  warmup 3\n"
    )
    text = " ".join(bench("transport", str(gloo)).stdout.split())
    assert (
        "a gloo job's log: gloo reports no transport, and NCCL did not run" in text
        and "NCCL_DEBUG=INFO set?" not in text
    )
    assert json.loads(bench("transport", str(gloo), "--json").stdout)[0]["backend"] == "gloo"
    other = tmp_path / "other.txt"
    other.write_text("# collective all_reduce  world size 2  device cuda  backend nccl\n")
    assert "no NCCL lines (was NCCL_DEBUG=INFO set?)" in bench("transport", str(other)).stdout


def test_bench_transport_refuses_a_missing_log(tmp_path):
    r = bench("transport", str(tmp_path / "nope.log"), check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert "nope.log: no such file or directory" in r.stderr


# --------------------------------------------------------------------------- expectations


def _ranks(name: str) -> list[dict]:
    return [r.facts() for r in transport.parse_nccl(open(FIXTURES / name))]


@pytest.mark.parametrize(
    ("fixture", "expect", "nodes", "gpus", "words"),
    [
        # the socket fallback a set meant for InfiniBand must not hide
        (
            "socket-ib-disabled-2.11.4.log",
            {"net": "IB"},
            2,
            1,
            "set s ran over Socket on 2 of 2 nodes (expected net IB)",
        ),
        ("no-ib-device-2.18.5.log", {"net": "IB"}, 2, 2, "set s ran over Socket on 2 of 2 nodes (expected net IB)"),
        ("roce-2.13.4.log", {"gdr": True}, 2, 1, "set s ran without GPUDirect RDMA on 2 of 2 nodes (expected gdr yes)"),
        (
            "roce-2.13.4.log",
            {"link_layer": "IB"},
            2,
            1,
            "set s had link_layer RoCE on 2 of 2 nodes (expected link_layer IB)",
        ),
        (
            "ib-gdrdma-2.28.9.log",
            {"net_devices": ("mlx5_0", "mlx5_1")},
            2,
            1,
            "set s used mlx5_0:1/IB,mlx5_1:1/IB,mlx5_2:1/IB,mlx5_3:1/IB on 2 of 2 nodes "
            "(expected net_devices mlx5_0,mlx5_1)",
        ),
        # a node that logged nothing is not taken on trust: 4 nodes planned, 2 in the log
        ("ib-gdrdma-2.28.9.log", {"net": "IB"}, 4, 1, "set s no evidence of net on 2 of 4 nodes (expected net IB)"),
        (
            "no-ib-device-2.18.5.log",
            {"intra_transport": ("NVLS",)},
            2,
            2,
            "set s had intra_transport SHM on 2 of 2 nodes",
        ),
        ("ib-gdrdma-2.5.6.log", {"nccl_version": "2.18"}, 2, 2, "set s had nccl_version 2.5.6 on 2 of 2 nodes"),
    ],
)
def test_a_contradicted_expectation_is_named_in_words(fixture, expect, nodes, gpus, words):
    why = transport.mismatch("s", expect.items(), _ranks(fixture), nodes, gpus)
    assert why is not None and why.startswith(words), why


@pytest.mark.parametrize(
    ("fixture", "expect", "nodes", "gpus"),
    [
        ("ib-gdrdma-2.28.9.log", {"net": "IB", "gdr": True, "link_layer": "IB", "nccl_version": "2.28"}, 2, 1),
        ("ib-gdrdma-2.28.9.log", {"net_devices": ("mlx5_0", "mlx5_1", "mlx5_2:1", "mlx5_3:1/IB")}, 2, 1),
        ("nvls-cumem-2.24.3.log", {"net": "ib", "intra_transport": ("NVLS", "P2P/CUMEM")}, 1, 8),  # IBext_v8 is IB
        ("aws-ofi-2.9.9.log", {"net": "AWS Libfabric", "gdr": True}, 2, 2),
        ("socket-ib-disabled-2.11.4.log", {"net": "Socket", "net_devices": ("enp225s0f1",)}, 2, 1),
        # one node needs no network: a network expectation is not checked there
        ("socket-ib-disabled-2.11.4.log", {"net": "IB", "gdr": True}, 1, 1),
    ],
)
def test_a_met_expectation_passes(fixture, expect, nodes, gpus):
    assert transport.mismatch("s", expect.items(), _ranks(fixture), nodes, gpus) is None


def test_sets_long_and_short_forms(tmp_path):
    from harness.config.sweepfile import load_sweep
    from harness.run.plan import expand

    path = tmp_path / "s.yaml"
    path.write_text(
        (ROOT / "sweeps" / "local.yaml")
        .read_text()
        .replace(
            "  default: {}\n",
            "  default: {}\n  ib: {env: {NCCL_IB_HCA: mlx5_0}, expect: {net: IB, gdr: true, net_devices: [mlx5_0]}}\n"
            "  plain: {NCCL_IB_DISABLE: '1'}\n  only: {expect: {net: Socket}}\n",
        )
    )
    sweep = load_sweep(path)
    assert sweep.nccl == {"default": {}, "ib": {"NCCL_IB_HCA": "mlx5_0"}, "plain": {"NCCL_IB_DISABLE": "1"}, "only": {}}
    assert sweep.nccl_expect == {
        "ib": {"net": "IB", "gdr": True, "net_devices": ("mlx5_0",)},
        "only": {"net": "Socket"},
    }
    jobs = {j.nccl_config: j for j in expand(sweep) if j.nodes == 1 and j.gpus_per_node == 1}
    assert dict(jobs["ib"].expect) == {"gdr": True, "net": "IB", "net_devices": ("mlx5_0",)}
    assert jobs["default"].expect == () and jobs["plain"].expect == ()
    # what is checked is not what is measured: the same variables give the same config hash
    assert jobs["only"].config_hash == jobs["default"].config_hash
    from harness.run.plan import Job

    assert Job.from_dict(json.loads(json.dumps(jobs["ib"].to_dict()))) == jobs["ib"]


def test_nccl_jobs_log_the_transport_unless_told_otherwise():
    from harness.config.cluster_profile import ClusterProfile
    from harness.executors.slurm.script import render_script
    from harness.run.plan import Job, WorkloadRun

    run = WorkloadRun("allreduce", "", ("-b", "8"))
    job = Job("n2-g1-torchrun-ib", "0" * 10, 2, 1, "torchrun", "ib", (), (), "cuda", "nccl", 10, (run,))
    script = render_script(job, ClusterProfile(name="c"), 60)
    assert (
        "export NCCL_DEBUG=INFO\nexport NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH\n"
        "export TORCH_NCCL_TRACE_BUFFER_SIZE=2000\nexport TORCH_NCCL_DUMP_ON_TIMEOUT=1\n"
        "mkdir -p jobs/n2-g1-torchrun-ib/nccl jobs/n2-g1-torchrun-ib/flight\n"
    ) in script
    assert (
        "export NCCL_DEBUG_FILE=jobs/n2-g1-torchrun-ib/nccl/allreduce.%h.%p.log\n"
        "export TORCH_NCCL_DEBUG_INFO_TEMP_FILE=jobs/n2-g1-torchrun-ib/flight/allreduce.rank\nrun_step allreduce "
    ) in script
    told = render_script(job, ClusterProfile(name="c", env={"NCCL_DEBUG": "WARN"}), 60)
    assert "export NCCL_DEBUG=INFO" not in told and "export NCCL_DEBUG=WARN" in told
    assert "export NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH" in told
    gloo = render_script(dataclasses.replace(job, device="cpu", backend="gloo"), ClusterProfile(name="c"), 60)
    assert "NCCL_DEBUG" not in gloo and "TORCH_NCCL" not in gloo
    assert "nccl" not in gloo.split("set -euo pipefail")[1]


def test_links_names_the_interface_of_real_connections():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    with server, socket.create_connection(("127.0.0.1", port)) as client, server.accept()[0]:
        seen = links.used_interfaces(set())
        assert seen["interfaces"] == ["lo"] and seen["peers"] == ["127.0.0.1"] and seen["connections"] == 2
        assert seen["addresses"] == ["127.0.0.1"]
        assert links.used_interfaces({port})["connections"] == 0  # the store's port is left out
        assert (client.getsockname()[0], client.getsockname()[1], "127.0.0.1", port) in links.connections()


def test_a_local_sweep_records_and_checks_gloo_interfaces(tmp_path):
    """Local ranks talk over loopback: a set expecting lo passes, one expecting eth9 is a
    mismatch in the summary and the sweep's exit status, and `bench compare` says why it has
    nothing of eth9's to compare."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: t\ndevice: cpu\nbackend: gloo\nnodes: [2]\ngpus_per_node: [1]\nlaunchers: [torchrun]\n"
        "nccl:\n  lo: {expect: {net: Socket, net_devices: [lo]}}\n  eth9: {expect: {net_devices: [eth9]}}\n"
        "env: {OMP_NUM_THREADS: '1'}\ntimeout_s: 60\n"
        "workloads:\n  allreduce: {min_bytes: 1K, max_bytes: 4K, iters: 3, warmup_iters: 1}\n"
    )
    out = tmp_path / "run"
    r = bench("sweep", str(path), "--executor", "local", "--out", str(out), check=False)
    assert r.returncode == 1, r.describe()
    assert (
        "transport mismatch: n2-g1-torchrun-eth9: set eth9 used lo on 2 of 2 nodes (expected net_devices eth9)"
        in r.stdout
    )
    t = pd.read_csv(out / "summary.csv")
    by = t.groupby("nccl_config")
    assert set(by.get_group("lo")["status"]) == {"COMPLETED"}
    assert set(by.get_group("eth9")["status"]) == {transport.TRANSPORT_MISMATCH}
    assert set(t["net"]) == {"Socket"} and set(t["net_devices"]) == {"lo"}
    assert t["reason"].dropna().str.contains("expected net_devices eth9").all()
    c = bench("compare", str(out), "--across", "nccl_config=lo,eth9", check=False)
    assert c.returncode == 2 and len(c.stderr.strip().splitlines()) == 1, c.describe()
    assert "no completed row with nccl_config 'eth9' (it has: lo; its rows are TRANSPORT_MISMATCH: set eth9" in c.stderr


def test_the_ib_net_plugin_counts_as_ib():
    """NCCL's IB plugin names its network IBext_v8: a set expecting IB ran over IB."""
    ranks = _ranks("nvls-cumem-2.24.3.log")
    ranks[1]["node"] = "a second node"  # the fixture's two ranks as two nodes, to check the network
    assert [r["net"] for r in ranks] == ["IBext_v8", "IBext_v8"]
    assert transport.mismatch("s", [("net", "IB")], ranks, 2, 1) is None
    assert transport.mismatch("s", [("net", "Socket")], ranks, 2, 1) == (
        "set s ran over IBext_v8 on 2 of 2 nodes (expected net Socket)"
    )


def test_numbers_no_nccl_prints_are_read_as_none_not_carried_on():
    """A channel count past any NCCL's (a corrupt or forged log) is read as none: carried on, it
    overflowed the summary's 64-bit column and crashed collect."""
    line = "node1:1:1 [0] NCCL INFO 99999999999999999999999 coll channels, 2 nvls channels"
    (rank,) = transport.parse_nccl([line, "node1:1:1 [0] NCCL INFO Channel 12345678901234567890/02 :    0   1"])
    assert rank.facts()["nccl_channels"] is None and rank.facts()["nvls_channels"] == 2
    assert transport.columns([rank.facts()])["nccl_channels"] is None


def test_the_collective_tables_show_what_nccl_ran_over():
    """An IB set and a socket set side by side: the report's and the terminal's collective tables
    carry net, its devices and GDR where the logs said; a run whose logs said nothing (gloo) has
    no such columns."""
    import pandas as pd

    from harness.present.tables import collective_table

    base = {"collective": "all_reduce", "group": "world", "size_bytes": 2**20, "time_us": 100.0, "algbw_gbps": 10.0}
    coll = pd.DataFrame(
        [
            {
                **base,
                "job": "n2-g8-torchrun-ib",
                "busbw_gbps": 20.0,
                "wrong": 0,
                "net": "IB",
                "net_devices": "mlx5_0:1,mlx5_1:1",
                "gdr": True,
            },
            {
                **base,
                "job": "n2-g8-torchrun-socket",
                "busbw_gbps": 2.0,
                "wrong": 0,
                "net": "Socket",
                "net_devices": "eth0",
                "gdr": None,
            },
        ]
    )
    head, rows = collective_table(coll)
    assert head[-3:] == ["net", "net devices", "GDR"]
    assert [r[-3:] for r in rows] == [["IB", "mlx5_0:1,mlx5_1:1", "yes"], ["Socket", "eth0", "-"]]
    head, _ = collective_table(coll.assign(net=None, net_devices=None, gdr=None))
    assert head[-1] == "#wrong"
