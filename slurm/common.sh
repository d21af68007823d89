# Shared by the sbatch jobs: find the checkout and its Python, fix what every rank must agree on.
# Sourced as "$CHECKOUT/slurm/common.sh" (sbatch runs a copy of the job script from its spool).

# Site defaults: KEY=VALUE lines (ACCEPTANCE_PROFILE, ACCEPTANCE_SRUN_MPI, MPI variables, ...) in
# $ACCEPTANCE_SITE_ENV (default /etc/acceptance/site.env), for what every job on this cluster needs;
# a variable already set in the job's environment wins. The emulated cluster writes one while up.
SITE_ENV="${ACCEPTANCE_SITE_ENV:-/etc/acceptance/site.env}"
if [ -r "$SITE_ENV" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
        case "$line" in ''|'#'*) continue ;; esac
        key="${line%%=*}"
        if ! [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || [ "$key" = "$line" ]; then
            echo "acceptance: $SITE_ENV: not KEY=VALUE: $line" >&2
            exit 2
        fi
        [ -z "${!key+set}" ] && export "$key=${line#*=}"
    done < "$SITE_ENV"
    echo "acceptance: site defaults from $SITE_ENV"
fi
# A hash seed shared by every rank: all ranks must collect the same tests in the same order.
export PYTHONHASHSEED=0
# srun's MPI plugin; pmix unless the site (or the emulated cluster: pmi2) says otherwise.
export ACCEPTANCE_SRUN_MPI="${ACCEPTANCE_SRUN_MPI:-pmix}"

if [ -n "${ACCEPTANCE_PYTHON:-}" ]; then
    PY="$ACCEPTANCE_PYTHON"
elif [ -x "$CHECKOUT/.venv/bin/python" ]; then
    PY="$CHECKOUT/.venv/bin/python"
else
    PY="$(command -v python3)"
fi
if ! "$PY" -c "import acceptance" 2>/dev/null; then
    echo "acceptance: $PY cannot import acceptance; run 'make venv' in $CHECKOUT or set ACCEPTANCE_PYTHON" >&2
    exit 2
fi

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
