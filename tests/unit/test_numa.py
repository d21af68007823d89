"""A rank on its NIC's NUMA node (acceptance.host.numa), on sysfs trees shaped like the kernel's, in a
process of its own (binding changes the process's CPUs and memory policy)."""
import ctypes.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def bind(root: Path, before: str = "", after: str = "") -> dict:
    """Bind a process of its own to mlx5_0's node; `before` runs first, `after` adds to what it prints."""
    code = ("import json, os, sys; from pathlib import Path; from acceptance.host import numa\n" + before +
            "\np = numa.bind_to_device('mlx5_0', Path(sys.argv[1]))\n"
            "out = {'node': p.node, 'memory': p.memory, 'why': p.why, 'cpus': sorted(os.sched_getaffinity(0))}\n"
            + after + "\nprint(json.dumps(out))")
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


def test_set_mempolicys_number_is_the_kernels_for_each_architecture():
    # arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h (arm64, riscv: 236 is
    # get_mempolicy there); arch/powerpc/kernel/syscalls/syscall.tbl.
    assert numa.SYS_SET_MEMPOLICY == {"x86_64": 238, "aarch64": 237, "riscv64": 237, "ppc64le": 261}


HEADERS = {  # the kernel's tables as installed with its headers (linux-libc-dev), where they are
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
}


@pytest.mark.parametrize("machine", sorted(HEADERS))
def test_set_mempolicys_number_matches_the_installed_kernel_headers(machine):
    if not HEADERS[machine].exists():
        pytest.skip(f"no {HEADERS[machine]} here")
    m = re.search(r"#define __NR_set_mempolicy (\d+)\b", HEADERS[machine].read_text())
    assert m and numa.SYS_SET_MEMPOLICY[machine] == int(m[1])


def test_the_memory_policy_read_back_is_the_one_set(tmp_path):
    # get_mempolicy through libnuma, not through this module's table: a wrong number for this
    # machine would leave the policy unset, or set another.
    if ctypes.util.find_library("numa") is None:
        pytest.skip("no libnuma here")
    after = ("import ctypes, ctypes.util\nmode, mask = ctypes.c_int(), (ctypes.c_ulong * 16)()\n"
             "libnuma = ctypes.CDLL(ctypes.util.find_library('numa'), use_errno=True)\n"
             "rc = libnuma.get_mempolicy(ctypes.byref(mode), mask, ctypes.c_ulong(16 * 64), None, ctypes.c_ulong(0))\n"
             "out['policy'] = [rc, mode.value, mask[0]]")
    got = bind(tree(tmp_path, "0", compress_ints(sorted(os.sched_getaffinity(0)))), after=after)
    assert got["memory"] is True and got["policy"] == [0, numa.MPOL_PREFERRED, 1], got


def test_an_unknown_architecture_is_not_bound_and_no_syscall_is_guessed(tmp_path):
    before = ("import ctypes\nreal = os.uname()\n"
              "os.uname = lambda: os.uname_result(tuple(real)[:4] + ('mips64',))\n"
              "def no_syscall(*args, **kwargs): raise SystemExit('a syscall was made')\n"
              "ctypes.CDLL = no_syscall")
    mine = sorted(os.sched_getaffinity(0))
    got = bind(tree(tmp_path, "0", compress_ints(mine)), before=before)
    assert (got["node"], got["memory"], got["cpus"]) == (0, False, mine)
    assert got["why"] == (f"mlx5_0: NUMA node 0, CPUs {compress_ints(mine)}, memory not bound "
                          "(set_mempolicy: no syscall number known for mips64)")
