# `make demo`: set up and run the embedded default (4 local MPI ranks as 2 nodes x 2 rails).
# `make test`: install what the tests need, then run the harness's own tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Debian packages the tests use (installed only when running as root and missing):
# Slurm and munge for the srun tests (a private local cluster per test run);
# Chromium for the browser test of the HTML report; prometheus for promtool, which lints
# the --prometheus textfile output.
APT_PACKAGES ?= slurm-wlm munge chromium iproute2 procps prometheus

.PHONY: demo test venv dev apt clean

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

test: apt dev
	$(BIN)/python -m pytest tests/ -q

clean:
	rm -rf $(VENV) build *.egg-info
