"""The e2e tests' sbatch jobs: docs/emulated-cluster.md's one line, on the emulated cluster that is up."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from cluster.emucluster import client_env  # noqa: E402


def job_env(**extra) -> dict:
    env = client_env({k: v for k, v in os.environ.items()
                      if not k.startswith(("ACCEPTANCE_", "PMI", "PYTEST_", "SLURM_", "HANG_"))})
    # Nothing about the cluster: emucluster's /etc/acceptance/site.env gives the jobs their profile,
    # srun MPI plugin and rail interfaces, as a site's would.
    env.update(extra)
    return env


def sbatch(script: str, tmp_path: Path, timeout: float = 600, nodes: int = 4, **env) -> tuple[int, str]:
    out = tmp_path / f"{Path(script).stem}-{time.monotonic_ns()}.out"
    # docs/emulated-cluster.md's one line (with the output file named): ranks per node come from the profile.
    p = subprocess.run(["sbatch", "--wait", "-N", str(nodes), "-o", str(out), f"slurm/{script}"],
                       cwd=ROOT, env=job_env(ACCEPTANCE_OUTPUT=str(tmp_path / "reports"), **env),
                       capture_output=True, text=True, timeout=timeout)
    log = out.read_text() if out.exists() else ""
    return p.returncode, p.stdout + p.stderr + log


def run_folder(log: str) -> Path:
    return Path(re.findall(r"^run folder: (\S+)$", log, re.M)[-1])
