#!/usr/bin/env bash
# What is run on the real 2x H200 device host for the site check in adoption mode (issue 9 item 1): the
# host's package and service state, `gpuprov check` of the whole site, `gpuprov apply --role cuda` and the
# site check again (ROLES="a b": also each of those roles checked on its own). Run from the repository root;
# .whl/ holds ansible-core, ansible-runner, pydantic and their dependencies for Python 3.12, which that host
# lacks, and .whl/collections/ the one non-builtin module the site uses (community.general.alternatives,
# copied from the `ansible` package: ansible-core alone does not ship it).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export ANSIBLE_COLLECTIONS_PATH=$PWD/.whl/collections PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 GPUPROV_STATE_DIR=/tmp/gpuprov-state COLUMNS=160 NO_COLOR=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
local_vars=(-e ansible_connection=local -e ansible_python_interpreter=/usr/bin/python3)
fleet=tests/data/real-h200/fleet.yml
{
  date -u; uname -r; echo "pid1: $(cat /proc/1/comm)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "## dpkg-query -W (nvidia, cuda, libnccl, libcudnn, dkms, python3-apt, python3-debian)"
  dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version} ${Architecture}\n' \
    | grep -Ei 'nvidia|cuda|libnccl|libcudnn|dkms|fabricmanager|python3-apt|python3-debian|^.. +gpg |gnupg' 
  echo "## apt sources, keyrings, preferences"
  ls -la /etc/apt/sources.list.d /etc/apt/preferences.d /usr/share/keyrings /etc/apt/keyrings 2>&1
  grep -rH . /etc/apt/sources.list.d/ 2>&1 | grep -v '^\s*#' | head -40
  echo "## processes"; pgrep -a 'nvidia|fabricmanager' || echo "no nvidia processes"
  echo "## tools"; for t in gpg dkms modinfo systemctl nvcc; do printf '%s: %s\n' "$t" "$(command -v $t || echo missing)"; done
  ls -d /usr/local/cuda* /usr/local/nvidia 2>&1; ls /etc/ld.so.conf.d /etc/profile.d 2>&1
  /usr/bin/python3 -c 'import apt' 2>&1 | tail -1; /usr/bin/python3 -c 'import debian; print("python3-debian ok")' 2>&1 | tail -1
} > "$out/site-env.txt" 2>&1
# 1. the site in check mode, as the host came; 2. apply the cuda role (on this host it installs nothing:
# it writes its PATH/linker files and selects /usr/local/cuda); 3. the site in check mode again.
python3 -m gpuprov check "$fleet" "${local_vars[@]}" \
  --json "$out/check-site-first-summary.json" > "$out/check-site-first.txt" 2>&1; echo "check site (first) rc=$?" >> "$out/site-env.txt"
python3 -m gpuprov apply "$fleet" --role cuda "${local_vars[@]}" > "$out/apply-cuda.txt" 2>&1; echo "apply cuda rc=$?" >> "$out/site-env.txt"
python3 -m gpuprov check "$fleet" "${local_vars[@]}" \
  --json "$out/check-site-summary.json" > "$out/check-site.txt" 2>&1; echo "check site rc=$?" >> "$out/site-env.txt"
# Each role after the driver on its own, so one failure does not hide the next role's result.
for r in ${ROLES:-}; do
  echo "=== check --role $r" >> "$out/check-roles.txt"
  python3 -m gpuprov check "$fleet" --role "$r" "${local_vars[@]}" >> "$out/check-roles.txt" 2>&1
  echo "check $r rc=$?" | tee -a "$out/check-roles.txt" >> "$out/site-env.txt"
done
cat "$out/site-env.txt"
