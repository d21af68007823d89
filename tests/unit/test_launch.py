"""Launchers: one class each, registered by name, chosen by --launcher (acceptance.cli.launch)."""

import pytest

from acceptance.cli import launch


def test_every_launcher_is_registered_once_by_its_name():
    assert list(launch.LAUNCHERS) == ["local", "mpirun", "srun"]
    assert all(isinstance(v, launch.Launcher) and v.name == k for k, v in launch.LAUNCHERS.items())


def test_auto_is_local_outside_a_slurm_allocation(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert launch.resolve("auto").name == "local"


def test_srun_without_srun_is_an_error_that_says_so(monkeypatch):
    monkeypatch.setattr(launch.shutil, "which", lambda name: None)
    with pytest.raises(launch.LaunchError, match="srun is not on PATH"):
        launch.resolve("srun")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert launch.resolve("auto").name == "local"  # an allocation without srun: run here


def test_local_groups_ranks_into_virtual_nodes():
    cmd, env, what = launch.LAUNCHERS["local"].command(3, 2)
    assert cmd[1:3] == ["-n", "6"] and cmd[-2:] == ["-m", "mpi4py"]
    assert env["ACCEPTANCE_VIRTUAL_NODES"] == "3" and env["ACCEPTANCE_RANKS_PER_NODE"] == "2"
    assert what.startswith("6 local ranks as 3 virtual nodes x 2 rails")


def test_srun_sets_each_ranks_rail_interface(monkeypatch):
    monkeypatch.setenv("ACCEPTANCE_RAIL_IFACE_PREFIX", "rail")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "4")
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE", raising=False)
    cmd, _, _ = launch.LAUNCHERS["srun"].command(4, 2)
    assert cmd[:5] == ["srun", "--kill-on-bad-exit=1", "--nodes=4", "--ntasks=8", "--ntasks-per-node=2"]
    assert 'FI_TCP_IFACE="${ACCEPTANCE_RAIL_IFACE_PREFIX}$SLURM_LOCALID"' in " ".join(cmd)
