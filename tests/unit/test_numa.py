"""A rank on its NIC's NUMA node (acceptance.host.numa), on sysfs trees shaped like the kernel's, in a
process of its own (binding changes the process's CPUs and memory policy)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from acceptance.host import numa
from acceptance.records.naming import compress_ints


def tree(root: Path, numa_node: str, cpulist: str | None) -> Path:
    dev = root / "class" / "infiniband" / "mlx5_0" / "device"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text(numa_node + "\n")
    if cpulist is not None:
        node = root / "devices" / "system" / "node" / f"node{max(int(numa_node), 0)}"
        node.mkdir(parents=True)
        (node / "cpulist").write_text(cpulist + "\n")
    return root


def bind(root: Path) -> dict:
    code = ("import json, os, sys; from pathlib import Path; from acceptance.host import numa; "
            "p = numa.bind_to_device('mlx5_0', Path(sys.argv[1])); "
            "print(json.dumps({'node': p.node, 'memory': p.memory, 'why': p.why, 'cpus': sorted(os.sched_getaffinity(0))}))")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_cpulists_as_the_kernel_prints_them():
    assert numa.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert numa.parse_cpulist("") == set() and numa.parse_cpulist(None) == set()


def test_a_rank_runs_on_its_nics_node_cpus_and_memory(tmp_path):
    mine = sorted(os.sched_getaffinity(0))
    got = bind(tree(tmp_path, "0", compress_ints(mine + [mine[-1] + 64])))  # a CPU this process may not use
    assert got["node"] == 0 and got["memory"] is True and got["cpus"] == mine, got
    assert got["why"] == f"mlx5_0: NUMA node 0, CPUs {compress_ints(mine)}, memory preferred there"


def test_no_node_or_no_usable_cpus_leaves_the_rank_where_it_is(tmp_path):
    mine = sorted(os.sched_getaffinity(0))
    got = bind(tree(tmp_path / "rxe", "-1", None))
    assert (got["node"], got["memory"], got["cpus"]) == (None, False, mine)
    assert got["why"] == "mlx5_0: no NUMA node in sysfs; not bound"
    got = bind(tree(tmp_path / "far", "1", "4096-4097"))  # CPUs this machine does not have
    assert (got["node"], got["memory"], got["cpus"]) == (1, False, mine)
    assert got["why"].startswith("mlx5_0: NUMA node 1: cannot run on its CPUs (") and got["why"].endswith("not bound")
