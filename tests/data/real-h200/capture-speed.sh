#!/usr/bin/env bash
# What is run on the real H200 device host to time a no-op `gpuprov check` of the whole site with Ansible's
# linear strategy and with mitogen's (the default), and to check that verify and doctor run under mitogen.
# Run from the repository root; .whl/ holds gpuprov's runtime dependencies for the host's Python 3.12
# (ansible-core, ansible-runner, mitogen, pydantic, rich, ...), which that host lacks. The fleet file is the
# adoption fleet with the host's GPU count (the device kind has one GPU or two). RUNS (default 3) timed checks
# per strategy; STRATEGIES (default "linear mitogen") names the strategies timed.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/.collections PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 GPUPROV_STATE_DIR=/tmp/gpuprov-state COLUMNS=160 NO_COLOR=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
count=$(nvidia-smi -L | grep -c '^GPU ')
fleet=/tmp/real-h200-fleet.yml
# the GPU model as the matrix names it (the device kind may lend an H100 instead of an H200)
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*80GB*HBM3*) model=H100-SXM5-80GB ;;
  *H200*) model=H200 ;;
  *) model=H200 ;;
esac
sed "s/count: 2,/count: $count,/; s/model: H200/model: $model/" tests/data/real-h200/fleet.yml > "$fleet"
local_vars=(-e ansible_connection=local -e ansible_python_interpreter=/usr/bin/python3)
{
  date -u; uname -r; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import ansible, ansible_runner, mitogen; print("ansible-core", ansible.__version__ if hasattr(ansible, "__version__") else "?")'
  python3 -m pip list --path /tmp/site 2>/dev/null | grep -Ei 'ansible|mitogen'
} > "$out/speed-env.txt" 2>&1
# a fresh machine lacks the cuda role's environment files (PATH, linker path) and bios_check's report: apply those
# roles first, so the timed checks are the no-op re-run of a converged host (not timed)
python3 -m gpuprov apply "$fleet" --role bios_check --role cuda "${local_vars[@]}" > "$out/speed-apply-cuda.txt" 2>&1
echo "apply cuda rc=$?" >> "$out/speed-env.txt"
# the first check converges nothing but warms the page cache and writes the run directory: not timed
python3 -m gpuprov check "$fleet" "${local_vars[@]}" > "$out/speed-warm.txt" 2>&1; echo "warm rc=$?" >> "$out/speed-env.txt"
for run in $(seq 1 "${RUNS:-3}"); do
  for strategy in ${STRATEGIES:-linear mitogen}; do
    # wall seconds and the CPU seconds of gpuprov and every process it waited for (the controller's cost;
    # on a local connection the host's modules are counted too)
    TIMEFORMAT="$strategy run $run: wall %R s, user %U s, sys %S s"
    { time GPUPROV_STRATEGY=$strategy python3 -m gpuprov check "$fleet" "${local_vars[@]}" \
        --json "$out/speed-$strategy-$run.json" > "$out/speed-$strategy-$run.txt" 2>&1; } 2>> "$out/speed.txt"
    echo "  rc $?" >> "$out/speed.txt"
  done
done
python3 -m gpuprov verify --local --json "$out/speed-verify.json" > "$out/speed-verify.txt" 2>&1; echo "verify rc=$?" >> "$out/speed-env.txt"
python3 -m gpuprov doctor --local --json > "$out/speed-doctor.json" 2> "$out/speed-doctor.err"; echo "doctor rc=$?" >> "$out/speed-env.txt"
cat "$out/speed-env.txt" "$out/speed.txt"
