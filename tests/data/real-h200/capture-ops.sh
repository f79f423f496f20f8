#!/usr/bin/env bash
# What was run on the real 2x H200 device host for doctor, bios_check and the site check
# (run from the repository root; .whl/ holds ansible-core, ansible-runner, pydantic and their
# dependencies for Python 3.12, which that host lacks).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 GPUPROV_STATE_DIR=/tmp/gpuprov-state COLUMNS=160 NO_COLOR=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
local_vars=(-e ansible_connection=local -e ansible_python_interpreter=/usr/bin/python3)
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$out/ops-env.txt"
python3 -m gpuprov doctor --local --json > "$out/doctor.json" 2> "$out/doctor.stderr"; echo "doctor rc=$?" >> "$out/ops-env.txt"
python3 -m gpuprov doctor --local > "$out/doctor.txt" 2>&1; echo "doctor(table) rc=$?" >> "$out/ops-env.txt"
python3 -m gpuprov apply tests/data/real-h200/fleet.yml --role bios_check "${local_vars[@]}" \
  --json "$out/bios_check-summary.json" > "$out/bios_check.txt" 2>&1; echo "bios_check rc=$?" >> "$out/ops-env.txt"
cp /var/lib/gpuprov/bios_check.json "$out/bios_check-report.json" 2>/dev/null
python3 -m gpuprov check tests/data/real-h200/fleet.yml "${local_vars[@]}" \
  --json "$out/check-site-summary.json" > "$out/check-site.txt" 2>&1; echo "check site rc=$?" >> "$out/ops-env.txt"
cat "$out/ops-env.txt"
