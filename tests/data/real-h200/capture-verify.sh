#!/usr/bin/env bash
# What was run on the real 2x H200 device host for `gpuprov verify` and the image-worker benchmark
# (run from the repository root; .whl/ holds ansible-core, ansible-runner, pydantic and their
# dependencies for Python 3.12; .benchdata/ the 400 benchmark JPEGs, see benchmarks/README.md).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 GPUPROV_STATE_DIR=/tmp/gpuprov-state COLUMNS=160 NO_COLOR=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
{ date -u; uname -r; nproc; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader; } > "$out/verify-env.txt"
python3 -m gpuprov verify --local --json "$out/verify-summary.json" > "$out/verify.txt" 2>&1; echo "verify rc=$?" >> "$out/verify-env.txt"
cp /var/lib/gpuprov/verify.json "$out/verify-report.json" 2>/dev/null
nvidia-smi dmon -s u -d 1 > "$out/bench-dmon.txt" 2>&1 & dmon=$!
vmstat 1 > "$out/bench-vmstat.txt" 2>&1 & vm=$!
python3 benchmarks/images_bench.py --data .benchdata --images 40000 --modes gpuprov1,gpuprov2 \
  --batch auto --workers 16 --threads 8 --json "$out/bench.json" > "$out/bench.txt" 2>&1; echo "bench rc=$?" >> "$out/verify-env.txt"
kill "$dmon" "$vm" 2>/dev/null
cat "$out/verify-env.txt"; tail -20 "$out/bench.txt"
