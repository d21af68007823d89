#!/bin/bash
# Slurm's HealthCheckProgram and Prolog: `acceptance node-check --slurm` on this node, which drains
# it with a reason "acceptance: <check>: <detail>" when a check fails and resumes it after passes,
# only when the reason is its own. slurm.conf (slurm/node-check.conf; docs/node-check.md):
#
#   HealthCheckProgram=/opt/acceptance/slurm/node-check.sh
#   HealthCheckInterval=300
#   HealthCheckNodeState=ANY,CYCLE
#   Prolog=/opt/acceptance/slurm/node-check.sh
#
# The checkout is this script's folder's parent (ACCEPTANCE_CHECKOUT overrides); site defaults
# (ACCEPTANCE_PROFILE, ACCEPTANCE_PYTHON, ...) from /etc/acceptance/site.env as for the sbatch jobs.
# Arguments are passed on, e.g. `node-check.sh --resume-after 3`. Exit code: node-check's own
# (0 healthy, 1 a check failed, 2 it could not check: the node is left as it was).
# The node check keeps its own deadline (node_check.deadline, default 10 s); `timeout` is the
# backstop below Slurm's 60 s limit for a HealthCheckProgram, so a wedged node never hangs slurmd.
CHECKOUT="${ACCEPTANCE_CHECKOUT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
ACCEPTANCE_QUIET_SITE=1 . "$CHECKOUT/slurm/site.sh" || exit 2
exec timeout --kill-after=5 50 "$PY" -m acceptance node-check --slurm "$@"
