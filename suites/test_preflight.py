"""Preflight: is the job itself sane before anything is measured?

Memory-lock limit (RDMA registration pins memory), the rank layout (same
ranks per node, every rail on every node), and one software stack across nodes.

Then the fabric as each node sees it: its RDMA devices; every port up, at the
profile's rate, MTU and link layer; one firmware, driver, kernel and rdma-core
on every node; huge pages; its GPUs, each near its rail's NIC, with a GPUDirect
RDMA path. A node's facts are read once, by its first rank, and shared with every
rank. A check whose source no node has skips with the reason; one that some nodes
have and others lack fails naming those nodes. What each check reads, records and
judges is acceptance.drivers.preflight's; the per-node bounds are the node check's.
"""

import pytest

from acceptance.drivers import preflight

pytestmark = pytest.mark.preflight
SUITE = preflight.SUITE


def _checked(check, *args):
    """check(*args)'s problems; skips with its reason when it has nothing to check on any node."""
    try:
        return check(*args)
    except preflight.Skip as e:
        pytest.skip(str(e))


def test_memlock_limit(profile, record):
    problems = preflight.memlock(profile, record)
    assert not problems, "\n".join(problems)


def test_rank_layout(topology, profile, record):
    problems = preflight.rank_layout(topology, profile, record)
    assert not problems, "rank layout is uneven:\n" + "\n".join(problems)


def test_software_versions_match(topology, profile, record):
    if not profile.get("preflight.same_versions"):
        pytest.skip("profile sets preflight.same_versions = false")
    problems = preflight.software_versions_match(topology, profile, record)
    assert not problems, "software differs between nodes:\n" + "\n".join(problems)


# --- the fabric, node by node -------------------------------------------------------------

@pytest.fixture(scope="module")
def fabric(topology):
    """node -> NodeFacts for every node of the job, in natural node order (collective)."""
    return preflight.gather_facts(topology)


def test_rdma_devices(topology, profile, fabric, record):
    problems = _checked(preflight.rdma_devices, topology, profile, fabric, record)
    assert not problems, "RDMA devices missing or miscounted:\n" + "\n".join(problems)


def test_ports_up(topology, profile, fabric, record):
    problems = _checked(preflight.ports_up, topology, profile, fabric, record)
    assert not problems, "RDMA ports not ACTIVE / LinkUp:\n" + "\n".join(problems)


def test_port_rate(topology, profile, fabric, record):
    problems = _checked(preflight.port_rate, topology, profile, fabric, record)
    assert not problems, "RDMA ports slower than the profile allows:\n" + "\n".join(problems)


def test_port_mtu(topology, profile, fabric, record):
    problems = _checked(preflight.port_mtu, topology, profile, fabric, record)
    assert not problems, "RDMA port MTU unknown or below the profile's:\n" + "\n".join(problems)


def test_link_layer(topology, profile, fabric, record):
    problems = _checked(preflight.link_layer, topology, profile, fabric, record)
    assert not problems, "RDMA ports on the wrong link layer:\n" + "\n".join(problems)


def test_fabric_versions_match(topology, profile, fabric, record):
    if not profile.get("preflight.same_versions"):
        pytest.skip("profile sets preflight.same_versions = false")
    problems = _checked(preflight.fabric_versions_match, topology, profile, fabric, record)
    assert not problems, "fabric software differs between nodes:\n" + "\n".join(problems)


def test_hugepages(topology, profile, fabric, record):
    if not profile.get("preflight.hugepages_min"):
        pytest.skip("profile does not ask for huge pages (preflight.hugepages_min = 0)")
    problems = _checked(preflight.hugepages, topology, profile, fabric, record)
    assert not problems, "huge pages short:\n" + "\n".join(problems)


def test_gpus(topology, profile, fabric, record):
    problems = _checked(preflight.gpus, topology, profile, fabric, record)
    assert not problems, "GPUs missing:\n" + "\n".join(problems)


def test_gpu_nic_affinity(topology, profile, fabric, record):
    problems = _checked(preflight.gpu_nic_affinity, topology, profile, fabric, record)
    farthest = profile.get("preflight.gpu_nic_max_distance")
    assert not problems, f"GPUs farther than {farthest} from their rail's NIC:\n" + "\n".join(problems)


def test_pcie_links(topology, profile, fabric, record):
    """Every RDMA NIC's PCIe link at the speed and width it and its upstream port can train to, and
    every GPU's at its width (an idle GPU lowers its speed: acceptance.host.pcie)."""
    problems = _checked(preflight.pcie_links, topology, profile, fabric, record)
    assert not problems, "PCIe links trained below what they can do:\n" + "\n".join(problems)


def test_roce_lossless_class(topology, profile, fabric, record):
    """Every node's RoCE ports with one lossless setup (PFC per priority, trust, ECN per priority:
    acceptance.host.roce names each file and command read); with preflight.lossless, the priority
    that the traffic class maps to is lossless and congestion-controlled (the class NCCL_IB_TC puts
    training on)."""
    tclass, problems = _checked(preflight.roce_lossless_class, topology, profile, fabric, record)
    assert not problems, f"RoCE lossless class (traffic class {tclass}) differs or is missing:\n" + "\n".join(problems)


@pytest.mark.gpudirect
def test_gpudirect(topology, profile, fabric, record):
    if not profile.get("preflight.gpudirect"):
        pytest.skip("profile sets preflight.gpudirect = false")
    problems = _checked(preflight.gpudirect, topology, profile, fabric, record)
    assert not problems, "GPU nodes without GPUDirect RDMA:\n" + "\n".join(problems)
