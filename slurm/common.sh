# Shared by the sbatch jobs: find the checkout and its Python, fix what every rank must agree on.
# Sourced as "$CHECKOUT/slurm/common.sh" (sbatch runs a copy of the job script from its spool).

. "$CHECKOUT/slurm/site.sh" || exit 2
# A hash seed shared by every rank: all ranks must collect the same tests in the same order.
export PYTHONHASHSEED=0
# srun's MPI plugin; pmix unless the site (or the emulated cluster: pmi2) says otherwise.
export ACCEPTANCE_SRUN_MPI="${ACCEPTANCE_SRUN_MPI:-pmix}"

OUTPUT="${ACCEPTANCE_OUTPUT:-$CHECKOUT/reports}"
# A job judges a real fabric: it needs the profile of its hardware, never local's harness-only bounds by default.
PROFILE="${ACCEPTANCE_PROFILE:-}"
if [ -z "$PROFILE" ]; then
    echo "acceptance: no profile: set ACCEPTANCE_PROFILE to a built-in ($("$PY" -m acceptance profiles --names | paste -sd, -)), a TOML file, or auto (the built-in matching these nodes' GPUs and RDMA port rate)" >&2
    exit 2
fi
# pytest arguments: a marker expression and anything extra (word-split on purpose).
PYTEST_ARGS=()
[ -n "${ACCEPTANCE_MARKERS:-}" ] && PYTEST_ARGS+=(-m "$ACCEPTANCE_MARKERS")
# shellcheck disable=SC2206
[ -n "${ACCEPTANCE_ARGS:-}" ] && PYTEST_ARGS+=($ACCEPTANCE_ARGS)
RUN_ARGS=(--launcher srun --profile "$PROFILE" --output "$OUTPUT")
[ -n "${ACCEPTANCE_SUITES:-}" ] && RUN_ARGS+=(--suites "$ACCEPTANCE_SUITES")
[ -n "${ACCEPTANCE_HANG_TIMEOUT:-}" ] && RUN_ARGS+=(--hang-timeout "$ACCEPTANCE_HANG_TIMEOUT")
[ "${ACCEPTANCE_DRAIN:-0}" = 1 ] && RUN_ARGS+=(--drain)

echo "acceptance: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?} (${SLURM_NNODES:-?} nodes), checkout $CHECKOUT, python $PY, profile $PROFILE"
