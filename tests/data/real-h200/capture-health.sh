#!/usr/bin/env bash
# What was run on a real H200 device host for the health rules verify and doctor share (gpuprov_health):
# the NVML facts with each GPU's fabric registration, `gpuprov verify --local` and `gpuprov doctor --local`
# on the same host. Run from the repository root with .whl/ holding gpuprov's runtime wheels for the host's
# Python (ansible-core, ansible-runner, pydantic, ...); $OUT is the folder to write to. Read-only on the host.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 GPUPROV_STATE_DIR=/tmp/gpuprov-state \
  COLUMNS=160 NO_COLOR=1
{
  date -u +%Y-%m-%dT%H:%M:%SZ; uname -r; nproc
  nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader
  nvidia-smi -q | grep -A3 -i '^ *Fabric' | head -8
  echo "daemons:"; for d in nvidia-persistenced nv-fabricmanager nv-hostengine; do pgrep -x "${d:0:15}" >/dev/null && echo "  $d"; done
} > "$out/health-env.txt" 2>&1
python3 -m gpuprov facts --json > "$out/health-facts.json" 2>> "$out/health-log.txt"; echo "facts rc=$?" >> "$out/health-env.txt"
python3 -m gpuprov verify --local --json "$out/health-verify-summary.json" > "$out/health-verify.txt" 2>&1
echo "verify rc=$?" >> "$out/health-env.txt"
cp /var/lib/gpuprov/verify.json "$out/health-verify-report.json" 2>/dev/null
python3 -m gpuprov doctor --local --json --window 2 --samples 2 > "$out/health-doctor.json" 2>> "$out/health-log.txt"
echo "doctor rc=$?" >> "$out/health-env.txt"
cat "$out/health-env.txt"; tail -30 "$out/health-verify.txt"; tail -c 3000 "$out/health-doctor.json"
