"""Hardware faults a check reads on a node (harness/evidence/faults.py): the IB ports' error
counters as sysfs prints them, what rose between two readings and what cannot be judged, and
the Xid events of kernel logs in the formats real drivers printed (tests/fixtures/xid/, each
file's header names its source)."""

from __future__ import annotations

import os

import pytest
from conftest import ROOT

from harness.evidence import faults

FIXTURES = ROOT / "tests" / "fixtures" / "xid"


def log(name: str) -> str:
    """A fixture's log, its "##" header taken off."""
    text = (FIXTURES / name).read_text()
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("##"))


def test_xids_of_an_older_driver_with_their_stamps():
    found = faults.parse_xids(log("dmesg-2015-channel.txt"))
    assert [(x.at_s, x.pci, x.xid) for x in found] == [
        (24128.828315, "0000:01:00", 32),
        (24128.828608, "0000:01:00", 32),
        (24128.834365, "0000:01:00", 31),
    ]
    assert found[2].text == "Ch 00000003, engmask 00000101, intr 10000000"
    assert found[0].line() == "GPU 0000:01:00: Xid 32 (Channel ID 00000000 intr 00004000)"
    # the check's start between the second and third: the third alone came during it
    assert faults.since(found, 24128.83) == found[2:]
    assert faults.since(found, 24129) == []


def test_xids_that_name_their_process_in_journalctls_lines_cannot_be_placed_in_time():
    found = faults.parse_xids(log("journal-590.48.01.txt"))
    assert [x.pci for x in found] == ["0000:dc:00", "0000:ed:00", "0000:ba:00", "0000:97:00"]
    assert {x.xid for x in found} == {45}
    assert found[0].text == "Ch 00000001 caused by previous Xid 149"  # the process is not the text
    assert all(x.at_s is None for x in found)
    assert faults.since(found, 0) is None  # no stamp: which came during a check cannot be told


def test_a_gpu_off_the_bus_without_an_xid_line_is_xid_79():
    (found,) = faults.parse_xids(log("dmesg-570.158.01-off-the-bus.txt"))
    assert (found.at_s, found.pci, found.xid) == (1843.308145, "0000:b3:00.0", faults.FELL_OFF)
    # the same first line with no "fallen off the bus" after it is no event
    assert faults.parse_xids("[ 1.0] NVRM: The NVIDIA GPU 0000:b3:00.0\n[ 1.1] NVRM: loading\n") == []


def sysfs(root, ports: dict[str, dict[str, str]]):
    """A sysfs tree of IB ports, each counter file as the kernel prints it ("%u\\n", or
    "N/A (no PMA)\\n" where the port has no performance agent: drivers/infiniband/core/sysfs.c)."""
    for port, counters in ports.items():
        dev, num = port.split("/")
        folder = root / "class" / "infiniband" / dev / "ports" / num / "counters"
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in counters.items():
            (folder / name).write_text(text + "\n")
    return root


def test_error_counters_read_from_sysfs(tmp_path):
    every = dict.fromkeys(faults.IB_ERRORS, "0")
    root = sysfs(
        tmp_path,
        {
            "mlx5_0/1": every | {"symbol_error": "12", "port_xmit_data": "99"},
            "mlx5_1/1": {"link_downed": "N/A (no PMA)", "port_rcv_errors": "3"},
        },
    )
    got = faults.read_ib_errors(root)
    assert got["mlx5_0/1"] == dict.fromkeys(faults.IB_ERRORS, 0) | {"symbol_error": 12}  # no data counter
    assert got["mlx5_1/1"] == {"link_downed": None, "port_rcv_errors": 3}  # the driver's own set
    assert faults.read_ib_errors(tmp_path / "none") == {}


def test_a_rise_names_its_port_and_what_cannot_be_judged_is_said():
    before = {
        "mlx5_0/1": {"symbol_error": 12, "link_downed": 1, "local_link_integrity_errors": 15, "port_rcv_errors": 7},
        "mlx5_1/1": {"symbol_error": 0, "port_xmit_discards": 9, "port_rcv_errors": None},
        "mlx5_2/1": {"symbol_error": 0},
    }
    after = {
        "mlx5_0/1": {"symbol_error": 20, "link_downed": 2, "local_link_integrity_errors": 15, "port_rcv_errors": 7},
        "mlx5_1/1": {"symbol_error": 0, "port_xmit_discards": 2, "port_rcv_errors": 0},
        "mlx5_3/1": {"symbol_error": 0},
    }
    risen, unjudged = faults.rises(before, after)
    assert [r.line() for r in risen] == [
        "mlx5_0/1: symbol_error rose from 12 to 20",
        "mlx5_0/1: link_downed rose from 1 to 2",
    ]
    assert unjudged == [
        # a 4-bit counter at 15 stops there: it could not show a rise
        "mlx5_0/1: local_link_integrity_errors is at its largest value, 15, where it stops: reset it (perfquery -R)",
        "mlx5_1/1: port_rcv_errors could not be read",
        "mlx5_1/1: port_xmit_discards fell from 9 to 2 (reset during the check)",
        "mlx5_2/1: went during the check",
        "mlx5_3/1: came during the check",
    ]
    assert faults.rises(after, after) == ([], unjudged[:1])  # nothing rose; the stopped counter still said


@pytest.mark.parametrize(
    ("script", "said"),
    [
        # util-linux's dmesg where kernel.dmesg_restrict is 1 and the user is not privileged
        ("echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1",
         "dmesg: read kernel buffer failed: Operation not permitted"),
        ("exit 3", "exit status 3"),
    ],
)  # fmt: skip
def test_a_kernel_log_that_cannot_be_read_says_why(tmp_path, monkeypatch, script, said):
    stand_in = tmp_path / "dmesg"
    stand_in.write_text(f"#!/bin/sh\n{script}\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert faults.kernel_log() == (None, said)
    stand_in.write_text(f"#!/bin/sh\ncat {FIXTURES / 'dmesg-2015-channel.txt'}\n")
    text, why = faults.kernel_log()
    assert why is None and len(faults.parse_xids(text)) == 3


def stand_in_dmesg(folder, monkeypatch, body: str) -> None:
    """`dmesg` on PATH as a script of `body`, for what this machine's kernel log cannot show."""
    folder.mkdir(exist_ok=True)
    (folder / "dmesg").write_text(f"#!/bin/sh\n{body}\n")
    (folder / "dmesg").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_a_nodes_reading_before_and_after_names_what_rose_and_the_xids_of_the_check(tmp_path, monkeypatch):
    """A reading written as the check's nodes write theirs, then a second after a port's
    symbol_error rose and the kernel logged an Xid: judged, the port and the GPU are named, and
    the Xids logged before the check are not. The node has been up for longer than the fixture's
    stamps (its /proc/uptime the test's), as the node that logged them had."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "uptime").write_text("24200.50 48000.00\n")
    root = sysfs(tmp_path / "sys", {"mlx5_3/1": dict.fromkeys(faults.IB_ERRORS, "0") | {"symbol_error": "12"}})
    before_log = tmp_path / "before.log"
    before_log.write_text(log("dmesg-2015-channel.txt"))
    stand_in_dmesg(tmp_path / "bin", monkeypatch, f"cat {before_log}")
    path = faults.write_reading(tmp_path / "before", "h017", root, proc)
    assert path == tmp_path / "before" / "h017.json" and path.stat().st_mode & 0o777 == 0o666 & ~_umask()
    before = faults.load_reading(path)
    assert before["ib_errors"]["mlx5_3/1"]["symbol_error"] == 12 and len(before["xids"]) == 3
    assert before["uptime_s"] == 24200.5

    (root / "class/infiniband/mlx5_3/ports/1/counters/symbol_error").write_text("20\n")
    stamp = before["uptime_s"] + 5
    before_log.write_text(
        before_log.read_text() + f"[{stamp:.6f}] NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.\n"
    )
    (proc / "uptime").write_text("24260.00 48100.00\n")
    after = faults.load_reading(faults.write_reading(tmp_path / "after", "h017", root, proc))
    found = faults.judge("h017", before, after)
    assert found.named == [
        "mlx5_3/1: symbol_error rose from 12 to 20",
        "GPU 0000:b3:00: Xid 79 (GPU has fallen off the bus.)",
    ]
    assert found.unjudged == []
    assert faults.judge("h017", before, before).named == []


def test_what_a_reading_cannot_tell_is_said(tmp_path, monkeypatch):
    stand_in_dmesg(
        tmp_path / "bin", monkeypatch, "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1"
    )
    unread = faults.reading(tmp_path / "no-sys")
    assert (unread["xids"], unread["ib_errors"]) == (None, {})
    found = faults.judge("h1", unread, unread)
    assert (found.unjudged, found.unread) == (
        [],
        ["Xids: the kernel log cannot be read (dmesg: read kernel buffer failed: Operation not permitted)"],
    )
    stand_in_dmesg(tmp_path / "bin", monkeypatch, f"cat {FIXTURES / 'journal-590.48.01.txt'}")
    unstamped = faults.reading(tmp_path / "no-sys")
    assert faults.judge("h1", unstamped, unstamped).unread == [
        "Xids: the kernel log's lines have no stamp, so those of the check cannot be told"
    ]
    rebooted = unstamped | {"uptime_s": 1.0}
    assert faults.judge("h1", unstamped, rebooted).unjudged == [
        "the node booted again during the check: its counters and kernel log began anew"
    ]
    (tmp_path / "bad.json").write_text('{"version": 1, "uptime_s": 5, "ib_errors": {}, "xids": [], "kernel_log": "x"}')
    with pytest.raises(ValueError, match=r"bad\.json: not a reading of a node's faults"):
        faults.load_reading(tmp_path / "bad.json")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_checks_readings_judge_each_node_and_the_verdict_groups_what_it_could_not(tmp_path, monkeypatch):
    """Readings of four nodes as a check leaves them: h1's port rose and is named; h2 and h3
    have a counter stopped at its largest value, said once for both; h4 has no reading after
    the check. The node check's verdict takes them (harness/nodes/judged.py)."""
    from harness.nodes import judged, verdict

    stand_in_dmesg(tmp_path / "bin", monkeypatch, "exit 0")
    folder = tmp_path / "faults"
    (folder / "before").mkdir(parents=True)
    for host, value in (("h1", "3"), ("h2", "255"), ("h3", "255"), ("h4", "0")):
        root = sysfs(tmp_path / host, {"mlx5_0/1": {"link_downed": value}})
        faults.write_reading(folder / "before", host, root)
        if host == "h1":
            (root / "class/infiniband/mlx5_0/ports/1/counters/link_downed").write_text("4\n")
        if host != "h4":
            faults.write_reading(folder / "after", host, root)
    found = faults.read_check(folder, ["h1", "h2", "h3", "h4"])
    assert [(f.host, f.named, f.unjudged) for f in found] == [
        ("h1", ["mlx5_0/1: link_downed rose from 3 to 4"], []),
        ("h2", [], ["mlx5_0/1: link_downed is at its largest value, 255, where it stops: reset it (perfquery -R)"]),
        ("h3", [], ["mlx5_0/1: link_downed is at its largest value, 255, where it stops: reset it (perfquery -R)"]),
        ("h4", [], ["no reading after the check"]),
    ]
    v = verdict.judge(["h1", "h2", "h3", "h4"], {}, {}, 0.1, {})
    judged.hardware_faults(v, found)
    assert [(f.nodes, f.reasons) for f in v.nodes] == [
        (("h1",), ["hardware fault: mlx5_0/1: link_downed rose from 3 to 4"])
    ]
    assert v.unjudged == [
        "hardware faults of h[2-3]: mlx5_0/1: link_downed is at its largest value, 255, where it stops: "
        "reset it (perfquery -R)",
        "hardware faults of h4: no reading after the check",
    ]
    assert v.drain == "h1"


def test_each_node_s_reading_holds_its_place_in_slurm_s_tree_and_the_check_holds_its_leaves_to_it(
    tmp_path, monkeypatch
):
    """Each node's reading before the check keeps its step's SLURM_TOPOLOGY_ADDR and pattern (the
    testbed's, Slurm 22.05.8). Judged by leaves that put h4 under leaf1 where Slurm puts it under
    leaf2, the paths cannot be judged, and the verdict says so; an address that does not end in
    its node is said; none at all (not under topology/tree) is no address."""
    from harness.nodes import judged, verdict

    stand_in_dmesg(tmp_path / "bin", monkeypatch, "exit 0")
    folder = tmp_path / "faults"
    (folder / "before").mkdir(parents=True)
    monkeypatch.setenv("SLURM_TOPOLOGY_ADDR_PATTERN", "switch.switch.node")
    for host, address in (
        ("h1", "spine.leaf1.h1"),
        ("h2", "spine.leaf1.h2"),
        ("h3", "spine.leaf2.h9"),
        ("h4", "spine.leaf2.h4"),
    ):
        monkeypatch.setenv("SLURM_TOPOLOGY_ADDR", address)
        faults.write_reading(folder / "before", host, tmp_path / "no-sys")
    monkeypatch.delenv("SLURM_TOPOLOGY_ADDR")
    faults.write_reading(folder / "before", "h5", tmp_path / "no-sys")
    names = ["h1", "h2", "h3", "h4", "h5"]
    found = {node.host: node.address for node in faults.read_check(folder, names) if node.address}
    assert found == {
        h: (a, "switch.switch.node")
        for h, a in (
            ("h1", "spine.leaf1.h1"),
            ("h2", "spine.leaf1.h2"),
            ("h3", "spine.leaf2.h9"),
            ("h4", "spine.leaf2.h4"),
        )
    }
    leaves = {"h1": "leaf1", "h2": "leaf1", "h3": "leaf2", "h4": "leaf1", "h5": "leaf2"}
    v = verdict.judge(names, {}, {}, 0.1, {})
    judged.leaves_in_job(v, found, leaves)
    assert v.unjudged == [
        "the leaves: Slurm's SLURM_TOPOLOGY_ADDR in the job puts h4 under other leaves than the check's (h4 under"
        " leaf2, not leaf1): the paths between leaves cannot be judged by them; mend the profile's leaves or topology"
    ]
    assert v.unread == ["h3: SLURM_TOPOLOGY_ADDR 'spine.leaf2.h9' ends in another node than h3"]
    v = verdict.judge(names, {}, {}, 0.1, {})
    judged.leaves_in_job(v, found, leaves | {"h4": "leaf2"})
    assert v.unjudged == []  # the same leaves: nothing said
    path = folder / "before" / "h1.json"
    path.write_text(path.read_text().replace('"topology": [', '"topology": [1, '))  # a reading is data, not trusted
    with pytest.raises(ValueError, match="not a reading of a node's faults"):
        faults.load_reading(path)
