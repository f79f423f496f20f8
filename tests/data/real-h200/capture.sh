#!/usr/bin/env bash
# Capture the real-hardware references of tests/data/real-h200/ (see README.md there). Run from the repo root
# on the GPU host, with $OUT the folder to write to. Read-only: NVML queries and nvidia-smi only.
# If .whl/ holds ansible-core/ansible-runner wheels they are installed into /tmp/site for the module run.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site" PATH="/tmp/site/bin:$PATH"
fi
{
  echo "== date"; date -u +%Y-%m-%dT%H:%M:%SZ
  echo "== uname"; uname -a
  echo "== os-release"; grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release
  echo "== python"; command -v python3; python3 --version; ls -l /usr/bin/python3 2>&1
  echo "== pip"; python3 -m pip list 2>/dev/null | grep -iE '^(nvidia-ml-py|click|rich|pyyaml|ansible-core|ansible-runner) '
  echo "== /sys/module/nvidia/version"; cat /sys/module/nvidia/version 2>&1
  echo "== /proc/driver/nvidia/version"; cat /proc/driver/nvidia/version 2>&1
  echo "== /proc/driver/nvidia/gpus"; ls /proc/driver/nvidia/gpus 2>&1
  echo "== nproc"; nproc
  echo "== nvidia-smi topo -m"; nvidia-smi topo -m 2>&1
  echo "== nvidia-smi nvlink -s"; nvidia-smi nvlink -s 2>&1 | head -60
  echo "== nvidia-smi nvlink -R"; nvidia-smi nvlink -R 2>&1 | head -60
} >"$OUT/env.txt" 2>&1
nvidia-smi -q -x >"$OUT/nvidia-smi-q.xml" 2>>"$OUT/log.txt"
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,persistence_mode,pcie.link.gen.max,pcie.link.width.current \
  --format=csv >"$OUT/nvidia-smi-query.csv" 2>>"$OUT/log.txt"
echo "== gpuprov facts --json" >>"$OUT/log.txt"
( time python3 -m gpuprov facts --json >"$OUT/facts.json" ) 2>>"$OUT/log.txt"; echo "rc=$?" >>"$OUT/log.txt"
echo "== gpuprov facts (table)" >>"$OUT/log.txt"
COLUMNS=200 python3 -m gpuprov facts >"$OUT/facts-table.txt" 2>&1; echo "rc=$?" >>"$OUT/facts-table.txt"
if python3 -c 'import ansible_runner, ansible' 2>>"$OUT/log.txt"; then
  echo "== module (local connection)" >>"$OUT/log.txt"
  timeout 240 python3 tests/data/real-h200/module_local.py >"$OUT/module-facts.json" 2>>"$OUT/log.txt"; echo "rc=$?" >>"$OUT/log.txt"
  echo "== module --check" >>"$OUT/log.txt"
  timeout 240 python3 tests/data/real-h200/module_local.py --check >"$OUT/module-facts-check.json" 2>>"$OUT/log.txt"; echo "rc=$?" >>"$OUT/log.txt"
  ls -la /tmp | grep -i ansible >>"$OUT/log.txt" 2>&1; ls -la ~/.ansible/tmp >>"$OUT/log.txt" 2>&1
fi
echo done >>"$OUT/log.txt"
