# Site defaults and the Python with acceptance: shared by the sbatch jobs (common.sh) and the node
# check (node-check.sh). Sourced with CHECKOUT set; sets PY; returns 2 on a malformed file or a
# Python without acceptance.
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
            return 2
        fi
        [ -z "${!key+set}" ] && export "$key=${line#*=}"
    done < "$SITE_ENV"
    [ -n "${ACCEPTANCE_QUIET_SITE:-}" ] || echo "acceptance: site defaults from $SITE_ENV"
fi

if [ -n "${ACCEPTANCE_PYTHON:-}" ]; then
    PY="$ACCEPTANCE_PYTHON"
elif [ -x "$CHECKOUT/.venv/bin/python" ]; then
    PY="$CHECKOUT/.venv/bin/python"
else
    PY="$(command -v python3)"
fi
if ! "$PY" -c "import acceptance" 2>/dev/null; then
    echo "acceptance: $PY cannot import acceptance; run 'make venv' in $CHECKOUT or set ACCEPTANCE_PYTHON" >&2
    return 2
fi

