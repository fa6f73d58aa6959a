"""A fabric's leaves read as Slurm states them (harness/config/topology.py): what `scontrol show
topology` of Slurm 22.05.8 printed of the testbed's tree and the topology.conf it read
(tests/fixtures/topology/), and the statements a topology.conf may hold that bench refuses."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from harness.config.cluster_profile import ClusterProfile, Leaf
from harness.config.fields import FieldError
from harness.config.topology import leaf_in_address, leaves_of

FIXTURES = ROOT / "tests" / "fixtures" / "topology"
TESTBED = (Leaf(name="leaf1", nodes="bnode[1-4]"), Leaf(name="leaf2", nodes="bnode[5-8]"))


def _fixture(name: str) -> str:
    return "".join(line for line in (FIXTURES / name).read_text().splitlines(True) if not line.startswith("##"))


@pytest.mark.parametrize("name", ["scontrol-22.05.8.txt", "topology.conf"])
def test_the_testbed_s_two_leaves_are_read_and_its_spine_is_not(name):
    """The spine lists every node below it in scontrol's output (Level=1), and only its leaves in
    topology.conf (Switches=): neither makes it a leaf."""
    assert leaves_of(_fixture(name)) == TESTBED


def test_comments_continued_lines_and_keys_of_any_case_are_read():
    text = "# leaves\nswitchname=s0 nodes=gpu[001-032]  # rack 1\nSwitchName=s1 \\\n  Nodes=gpu[033-064]\n\n"
    text += "SwitchName=core Switches=s[0-1] LinkSpeed=100\n"
    assert leaves_of(text) == (Leaf(name="s0", nodes="gpu[001-032]"), Leaf(name="s1", nodes="gpu[033-064]"))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("BlockName=b1 Nodes=gpu[1-18]\n", "line 1: topology/block's BlockName is not read"),
        ("SwitchName=s0 Nodes=a1\nNodes=a2\n", "line 2: 'Nodes=a2' states no SwitchName="),
        ("SwitchName=s0 Nodes=a1 oops\n", "line 1: 'oops' is not KEY=VALUE"),
        ("SwitchName=s0 Nodes=a1\nSwitchName=s0 Nodes=a2\n", "line 2: switch 's0' is stated twice"),
        ("SwitchName=s0 Nodes=a1 nodes=a2\n", "line 1: nodes is stated twice"),
        ("SwitchName=s0;id Nodes=a1\n", "line 1: 's0;id' is not a switch name"),
        ("SwitchName=s0 Nodes=a[1-\n", "line 1: 'a[1-' is not a hostlist of nodes"),
        ("SwitchName=s0 Level=x Nodes=a1\n", "line 1: Level='x' is not a number"),
        ("SwitchName=core Switches=s0\n", "no leaf switch"),
        ("", "no leaf switch"),
    ],
)
def test_what_is_not_a_tree_of_leaves_is_refused_with_its_line(text, said):
    with pytest.raises(ValueError, match="^" + said.replace("[", r"\[").replace("(", r"\(")):
        leaves_of(text)


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"topology": "slurm", "leaves": [{"name": "s0", "nodes": "a1"}]}, "give one of leaves and topology"),
        ({"topology": "topology.conf"}, "'topology.conf' is not valid; valid: slurm, or a topology.conf's absolute"),
        ({"topology": "/etc/slurm/topo;id"}, "is not valid"),
    ],
)
def test_a_profile_s_topology_is_slurm_or_an_absolute_path_and_never_beside_leaves(fields, said):
    leaves = tuple(Leaf(**leaf) for leaf in fields.get("leaves", ()))
    with pytest.raises(FieldError, match=said) as raised:
        ClusterProfile(name="lab", topology=fields["topology"], leaves=leaves)
    assert raised.value.key == "topology"


def test_a_node_s_leaf_is_read_from_its_job_step_s_address():
    """SLURM_TOPOLOGY_ADDR and its pattern as Slurm 22.05.8 set them in an srun step on the
    testbed's 4 nodes (`spine.leaf2.bnode4`, `switch.switch.node`; docs/reference/sources.md)."""
    assert leaf_in_address("spine.leaf2.bnode4", "switch.switch.node", "bnode4") == "leaf2"
    assert leaf_in_address("s1.bnode1", "switch.node", "bnode1") == "s1"  # a tree of one level


@pytest.mark.parametrize(
    ("address", "pattern", "said"),
    [
        ("spine.leaf2.bnode4", "switch.switch.node", "ends in another node than bnode3"),
        ("spine.leaf2.bnode3", "switch.node", "no switch above a node"),
        ("bnode3", "node", "no switch above a node"),
        ("spine.leaf2.bnode3", "switch.node.node", "no switch above a node"),
        ("spine.le$(id)af.bnode3", "switch.switch.node", "le$(id)af"),
    ],
)
def test_an_address_that_does_not_fit_is_refused_with_what_is_wrong(address, pattern, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        leaf_in_address(address, pattern, "bnode3")
