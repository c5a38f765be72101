"""Topology labels: the nvidia-smi vocabulary from NVML levels, NVLink counting, and per-pair failures."""

from __future__ import annotations

import pytest

from paratrain.devices.inventory import collect
from paratrain.devices.topology import LEGEND, level_label, link_matrix
from tests.helpers import fake_pynvml as nv
from tests.helpers.fake_pynvml import FakeNvml


def _levels() -> list[list[int]]:
    """4 GPUs: 0-1 NVLinked; 0-2 one switch; 1-2 several bridges; 0-3 other socket; 1-3 same NUMA node;
    2-3 host bridge."""
    pairs = {(0, 1): nv.NVML_TOPOLOGY_SINGLE, (0, 2): nv.NVML_TOPOLOGY_SINGLE,
             (1, 2): nv.NVML_TOPOLOGY_MULTIPLE, (0, 3): nv.NVML_TOPOLOGY_SYSTEM,
             (1, 3): nv.NVML_TOPOLOGY_NODE, (2, 3): nv.NVML_TOPOLOGY_HOSTBRIDGE}
    levels = [[nv.NVML_TOPOLOGY_INTERNAL] * 4 for _ in range(4)]
    for (a, b), level in pairs.items():
        levels[a][b] = levels[b][a] = level
    return levels


def _matrix(fake: FakeNvml) -> list[list[str]]:
    fake.nvmlInit()
    try:
        handles = [fake.nvmlDeviceGetHandleByIndex(i) for i in range(fake.nvmlDeviceGetCount())]
        return link_matrix(fake, handles).matrix
    finally:
        fake.nvmlShutdown()


def test_labels_match_nvidia_smi_and_count_nvlinks():
    matrix = _matrix(FakeNvml(4, topology=_levels(), nvlinks={(0, 1): 4}))
    assert matrix == [
        ["X", "NV4", "PIX", "SYS"],
        ["NV4", "X", "PXB", "NODE"],
        ["PIX", "PXB", "X", "PHB"],
        ["SYS", "NODE", "PHB", "X"],
    ]


def test_nvswitch_peers_read_nv_without_a_count():
    matrix = _matrix(FakeNvml(3, switched={0, 1}))
    assert matrix[0][1] == matrix[1][0] == "NV"
    assert matrix[0][2] == "PHB", "GPU 2 is not on the switch: its PCIe level shows"


def test_nvlink_peer_with_unreadable_links_is_plain_nv():
    fake = FakeNvml(2, nvlinks={(0, 1): 2}, not_supported={"nvmlDeviceGetNvLinkState"})
    assert _matrix(fake)[0][1] == "NV"


def test_failing_ancestor_query_gives_na_for_that_pair_only():
    fake = FakeNvml(2, not_supported={"nvmlDeviceGetTopologyCommonAncestor"})
    assert _matrix(fake) == [["X", "n/a"], ["n/a", "X"]]


@pytest.mark.parametrize(("level", "label"), [(0, "PIX"), (10, "PIX"), (20, "PXB"), (30, "PHB"), (40, "NODE"),
                                              (50, "SYS"), (60, "n/a")])
def test_level_label(level, label):
    assert level_label(level) == label


def test_every_label_is_in_the_legend():
    legend = {label for label, _ in LEGEND}
    matrix = _matrix(FakeNvml(4, topology=_levels(), nvlinks={(0, 1): 1}))
    used = {"NV#" if label.startswith("NV") and label != "NODE" else label for row in matrix for label in row}
    assert used <= legend


def test_collect_adds_topology_only_when_asked():
    fake = FakeNvml(3, nvlinks={(1, 2): 2})
    assert collect(fake, env={}).topology is None
    topo = collect(fake, topology=True, env={}).topology
    assert topo is not None
    assert topo.gpus == [0, 1, 2]
    assert topo.label(2, 1) == "NV2" and topo.label(0, 0) == "X"
    assert topo.to_json() == {"gpus": [0, 1, 2], "matrix": topo.matrix}
    assert fake.init_count == 0
