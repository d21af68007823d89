"""Probes run for real on this machine (MPICH wheel, no RDMA, no GPU, no Slurm);
Slurm and srun are stood in for by tiny shell scripts on a temporary PATH."""
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acceptance.cli import doctor
from acceptance.host import command
from acceptance.cli.doctor import (
    Availability,
    first_line,
    format_report,
    probe_all,
    probe_gpu,
    probe_launcher,
    probe_mpi,
    probe_nccl,
    probe_slurm,
    probe_verbs,
)

VENV_MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
LINE = re.compile(r"^(mpi|launcher|slurm|verbs|perftest|gpu|nccl): (usable|unavailable) \u2014 \S")


def script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def no_slurm_env(monkeypatch):
    for var in ("SLURM_JOB_ID", "SLURM_NNODES", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(var, raising=False)


def test_line_shape():
    assert Availability("gpu", True, "1\u00d7 X").line() == "gpu: usable \u2014 1\u00d7 X"
    assert Availability("verbs", False, "why").line() == "verbs: unavailable \u2014 why"


@pytest.mark.parametrize("code, text", [(22703, "2.27.3"), (21805, "2.18.5"), (2804, "2.8.4"), (2708, "2.7.8")])
def test_nccl_version_string(code, text):
    from acceptance.engines.nccl import nccl_version_string
    assert nccl_version_string(code) == text


def test_probe_mpi_finds_mpich():
    a = probe_mpi()
    assert a.usable and a.name == "mpi"
    assert "MPICH" in a.detail and "mpi4py" in a.detail
    assert "thread level MPI_THREAD_MULTIPLE: the hang watchdog may call MPI" in a.detail


def test_doctor_says_what_a_lower_thread_level_means():
    from acceptance.cli.doctor import thread_mode
    assert thread_mode(2).startswith("thread level MPI_THREAD_SERIALIZED (below MPI_THREAD_MULTIPLE")
    assert "makes no MPI call" in thread_mode(1)


def test_probe_verbs_unavailable_with_reason():
    a = probe_verbs()
    assert not a.usable
    assert "pyverbs" in a.detail or "devices" in a.detail


def test_probe_gpu_and_nccl_unavailable_with_reason():
    gpu, nccl = probe_gpu(), probe_nccl()
    assert not gpu.usable and "cupy" in gpu.detail
    assert not nccl.usable and nccl.detail


def test_launcher_prefers_venv_mpiexec(no_slurm_env):
    a = probe_launcher()
    assert a.usable and VENV_MPIEXEC in a.detail and "5." in a.detail


def test_launcher_uses_srun_inside_allocation(monkeypatch, tmp_path):
    script(tmp_path, "srun", 'echo "slurm 23.11.4"')
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    a = probe_launcher()
    assert a.usable and a.detail.startswith(f"srun {tmp_path}/srun") and "slurm 23.11.4" in a.detail


def test_launcher_falls_back_to_mpiexec_without_srun(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # empty dir: no srun
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    a = probe_launcher()
    assert a.usable and VENV_MPIEXEC in a.detail and "srun not on PATH" in a.detail


def test_launcher_falls_back_to_path_mpiexec(monkeypatch, tmp_path, no_slurm_env):
    from acceptance.cli import launch
    monkeypatch.setattr(launch.sys, "executable", str(tmp_path / "nobin" / "python"))
    script(tmp_path, "mpirun", 'echo "mpirun (Open MPI) 4.1.5"')
    monkeypatch.setenv("PATH", str(tmp_path))
    a = probe_launcher()
    assert a.usable and str(tmp_path / "mpirun") in a.detail and "Open MPI" in a.detail
    (tmp_path / "mpirun").unlink()
    a = probe_launcher()
    assert not a.usable and "no mpiexec/mpirun on PATH" in a.detail


def test_slurm_outside_allocation_without_tools(monkeypatch, tmp_path, no_slurm_env):
    monkeypatch.setenv("PATH", str(tmp_path))
    a = probe_slurm()
    assert not a.usable
    assert a.detail.startswith("not inside a Slurm allocation; ") and "sinfo" in a.detail


def test_slurm_controller_answers(monkeypatch, tmp_path, no_slurm_env):
    script(tmp_path, "sinfo", "echo n1; echo n2; echo n2")  # n2 in two partitions
    monkeypatch.setenv("PATH", str(tmp_path))
    a = probe_slurm()
    assert a.usable and "2 node(s)" in a.detail


def test_slurm_controller_down(monkeypatch, tmp_path, no_slurm_env):
    script(tmp_path, "sinfo", 'echo "sinfo: error: Unable to contact slurm controller" >&2; exit 1')
    monkeypatch.setenv("PATH", str(tmp_path))
    a = probe_slurm()
    assert not a.usable and "Unable to contact slurm controller" in a.detail


def test_slurm_inside_allocation(monkeypatch, tmp_path):
    script(tmp_path, "srun", "exit 0")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_NNODES", "2")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    a = probe_slurm()
    assert a.usable and "allocation 7" in a.detail and "n[1-2]" in a.detail


def test_hanging_command_is_bounded(tmp_path):
    # A shell that forks `sleep`: the grandchild holds the pipe, so killing only the
    # child would still hang; first_line must kill the whole group.
    hang = script(tmp_path, "hang", "sleep 600; echo late")
    start = time.monotonic()
    assert first_line([str(hang)], timeout=0.5) is None
    assert time.monotonic() - start < 300  # long before the hang would have ended


def test_hanging_sinfo_is_a_reason(monkeypatch, tmp_path, no_slurm_env):
    monkeypatch.setattr(command, "TIMEOUT_S", 0.5)
    script(tmp_path, "sinfo", "exec /bin/sleep 30")
    monkeypatch.setenv("PATH", str(tmp_path))
    a = probe_slurm()
    assert not a.usable and "timed out" in a.detail


def test_first_line_picks_matching_line(tmp_path):
    tool = script(tmp_path, "tool", 'echo "HYDRA build details:"; echo "    Version:    5.0.2"')
    assert first_line([str(tool)]) == "HYDRA build details:"
    assert first_line([str(tool)], contains="version") == "Version: 5.0.2"
    assert first_line([str(tmp_path / "missing")]) is None


def test_probes_never_raise_in_a_broken_environment(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    items = probe_all()
    assert [a.name for a in items] == ["mpi", "launcher", "slurm", "verbs", "perftest", "gpu", "nccl"]
    for a in items:
        assert LINE.match(a.line()), a.line()


def test_a_raising_probe_reports_instead(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "which", lambda *_: 1 / 0)
    a = probe_slurm()
    assert not a.usable and "ZeroDivisionError" in a.detail


def test_report_from_a_fresh_interpreter():
    code = "from acceptance.cli.doctor import probe_all, format_report; print(format_report(probe_all()))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 7
    assert all(LINE.match(ln) for ln in lines), lines
    assert format_report(probe_all()).count("\n") == 6


def test_perftest_probe_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("ACCEPTANCE_PERFTEST_DIR", str(tmp_path))
    a = doctor.probe_perftest()
    assert not a.usable and "ib_write_bw, ib_write_lat not on ACCEPTANCE_PERFTEST_DIR=" in a.detail
    assert "apt install perftest" in a.detail


def test_the_mpi_stack_and_its_transport_libraries_are_named(tmp_path):
    from acceptance.cli import launch
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /opt/hpcx/ucx/lib/libucp.so.0.0.0\n"
                    "7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14\n"
                    "7f04-7f05 rw-p 00000000 00:00 0\n")
    assert doctor.transports(str(maps)) == ["UCX (libucp.so.0.0.0)", "verbs (libibverbs.so.1.14)"]
    assert doctor.transports(str(tmp_path / "none")) == []
    for text, stack in (("mpirun (Open MPI) 4.1.5", "Open MPI"), ("prterun (PRRTE) 3.0.6", "Open MPI"),
                        ("HYDRA build details:\\n    Version: 4.2.0", "MPICH"), ("something else", "")):
        script(tmp_path, "mpiexec", f'printf "{text}\\n"')
        assert launch.stack_of(str(tmp_path / "mpiexec")) == stack, text
