#!/bin/bash
# Slurm's HealthCheckProgram and Prolog: `acceptance node-check --slurm` on this node, which drains
# it with a reason "acceptance: <check>: <detail>" when a check fails and resumes it after passes,
# only when the reason is its own. slurm.conf lines: slurm/node-check.conf; docs/node-check.md.
#
# The checkout is this script's folder's parent (ACCEPTANCE_CHECKOUT overrides); site defaults
# (ACCEPTANCE_PROFILE, ACCEPTANCE_PYTHON, ...) from /etc/acceptance/site.env as for the sbatch jobs.
# Arguments are passed on, e.g. `node-check.sh --resume-after 3`.
#
# Exit code, as a HealthCheckProgram: node-check's own (0 healthy, 1 a check failed, 2 a usage or
# profile error, 3 a check could not run: the node is left as it was). As a Prolog (slurmd sets SLURM_SCRIPT_CONTEXT=prolog_slurmd):
# 1 after a failure, which node-check has drained the node for, so the job is requeued and the node
# keeps our reason (Slurm drains only a node not drained yet, as "Prolog error"); 0 when the check
# could not run or timed out, so that our own trouble neither fails the job nor drains the node.
# node-check keeps its own deadline (node_check.deadline, 10 s); `timeout` is the backstop below
# Slurm's 60 s limit for a HealthCheckProgram, so a wedged node never hangs slurmd.
CHECKOUT="${ACCEPTANCE_CHECKOUT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
# slurmd gives its scripts no PATH (and no HOME): the commands the checks run need one.
export PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
ACCEPTANCE_QUIET_SITE=1 . "$CHECKOUT/slurm/site.sh" || exit 2
timeout --kill-after=5 50 "$PY" -m acceptance node-check --slurm "$@"
rc=$?
if [ "${SLURM_SCRIPT_CONTEXT:-}" = prolog_slurmd ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
    echo "acceptance: node-check could not check ${SLURMD_NODENAME:-this node} (exit $rc): node and job left as they were" >&2
    exit 0
fi
exit "$rc"
