#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Run the verification ladder on a GPU host and return one step per rung (pass, fail or skip, with evidence)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: verify_ladder
short_description: Prove a GPU host ready - NVML, nvidia-smi, versions, persistence, Fabric Manager, CUDA, P2P, NCCL
description:
  - Runs the verification ladder and returns C(report) with one entry per step, each
    C({name, status, evidence, reason}) where C(status) is C(pass), C(fail) or C(skip).
  - Steps C(gpus), C(nvidia_smi), C(driver_version), C(persistence), C(fabric_manager), C(services), C(mig),
    C(cuda_sample), C(p2p), C(nccl_allreduce), C(container), C(dcgm_diag), in that order.
  - Reads and runs tests only; the only files it writes are the CUDA sample's binary inside O(workdir). Needs
    neither systemd nor python3-apt; runs on Python 3.8 and later. Safe in check mode.
options:
  nvml:
    description: The C(gpuprov_gpus) fact of nvml_facts.
    type: dict
    required: true
  workdir:
    description: Scratch directory holding C(gpuprov_cuda_sample.cu) and C(gpuprov_nccl_allreduce.py).
    type: path
    required: true
  expected:
    description: C({model, count, nvswitch, driver_version}) from the fleet file; null values skip that comparison.
    type: dict
    default: {}
  thresholds:
    description: C({min_busbw_gbps}) (number, or null for the model table), C(busbw_table) {model prefix -
      {nvlink, pcie}} in GB/s.
    type: dict
    default: {}
  steps:
    description: Steps to run; the others are reported as skip.
    type: list
    elements: str
  tool_dirs:
    description: Directories searched for tools after C(PATH) (nvcc lives in /usr/local/cuda/bin).
    type: list
    elements: path
    default: []
  python:
    description: Python with torch for the NCCL step; empty searches every C(python3) on C(PATH) and O(tool_dirs).
    type: str
    default: ""
  nccl:
    description: C({size_bytes, iters, warmup, timeout_s, env}) of the all-reduce.
    type: dict
    default: {}
  container:
    description: C({image, pull, timeout_s}) of the container smoke test.
    type: dict
    default: {}
  dcgm:
    description: C({level, timeout_s}) of the DCGM diagnostic.
    type: dict
    default: {}
  mig:
    description: C({layout, layouts}), the fleet's C(mig.layout) name and C(mig.layouts) table; a null layout skips
      the C(mig) step (MIG is not managed).
    type: dict
    default: {}
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Run the verification ladder
  verify_ladder:
    nvml: "{{ ansible_facts['gpuprov_gpus'] }}"
    workdir: /tmp/gpuprov-verify.x1y2
  check_mode: false
  register: result
"""

RETURN = r"""
report:
  description: C({steps, summary {pass, fail, skip}, status}) where status is fail when any step failed, else pass.
  returned: always
  type: dict
"""

import json
import os
import re
import shutil
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_model
from ansible_collections.gpuprov.gpu.plugins.module_utils.health import (
    driver_problems,
    fabric_manager,
    gpu_problems,
    nvswitch_system,
    persistence_off,
    running_daemons,
    service_states,
    stopped_services,
)
from ansible_collections.gpuprov.gpu.plugins.module_utils.miglayout import (
    desired_layout,
    layout_problems,
    parse_mig_instances,
    unset,
)

STEPS = ("gpus", "nvidia_smi", "driver_version", "persistence", "fabric_manager", "services", "mig", "cuda_sample",
         "p2p", "nccl_allreduce", "container", "dcgm_diag")

#: ``nvidia-smi topo -p2p`` cell values (nvmlDeviceGetP2PStatus' NVML_P2P_STATUS_* under the CLI).
P2P_STATUS = {"OK": "ok", "CNS": "chipset not supported", "GNS": "GPU not supported",
              "TNS": "topology not supported", "NS": "not supported", "U": "unknown", "DR": "disabled by regkey"}


def step(name, status, evidence=None, reason=None, duration_s=None):
    """One rung's result: ``{name, status, evidence, reason, duration_s}``."""
    return {"name": name, "status": status, "evidence": evidence if evidence is not None else {},
            "reason": reason, "duration_s": duration_s}


class Runner:
    """Runs a command with a timeout and returns ``(rc, stdout, stderr)``; rc None when it could not start or
    timed out (stderr says which)."""

    def __call__(self, argv, timeout, env=None, cwd=None):
        full_env = dict(os.environ)
        full_env.update(env or {})
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd,
                                  check=False)
        except subprocess.TimeoutExpired:
            return None, "", "timed out after %ss: %s" % (timeout, " ".join(argv))
        except OSError as exc:
            return None, "", "could not run %s: %s" % (argv[0], exc)
        return proc.returncode, proc.stdout, proc.stderr


def find_tool(name, tool_dirs, path=None):
    """Absolute path of executable ``name`` on PATH, else in ``tool_dirs`` (globs allowed); None if absent."""
    found = shutil.which(name, path=path)
    if found:
        return found
    for pattern in tool_dirs:
        import glob

        for directory in sorted(glob.glob(pattern), reverse=True):
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def python_candidates(tool_dirs, path=None):
    """Every distinct ``python3`` on PATH and in ``tool_dirs``, in search order."""
    seen, out = set(), []
    dirs = (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep) + list(tool_dirs)
    for directory in dirs:
        candidate = os.path.join(directory, "python3") if directory else ""
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            # Not realpath: every virtual environment's python3 links to the same binary, yet each sees its
            # own site-packages (pyvenv.cfg sits beside the link).
            key = os.path.abspath(candidate)
            if key not in seen:
                seen.add(key)
                out.append(candidate)
    return out


def parse_p2p_matrix(text):
    """``nvidia-smi topo -p2p r`` -> {"0-1": "OK", ...} for every ordered GPU pair (the legend is ignored)."""
    rows = {}
    header = None
    for raw in text.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw).strip()
        cells = line.split()
        if not cells:
            continue
        if header is None and all(re.match(r"^GPU\d+$", c) for c in cells):
            header = [int(c[3:]) for c in cells]
            continue
        if header is not None and re.match(r"^GPU\d+$", cells[0]) and len(cells) - 1 == len(header):
            src = int(cells[0][3:])
            for dst, value in zip(header, cells[1:]):
                if dst != src:
                    rows["%d-%d" % (src, dst)] = value
    return rows


def dcgm_statuses(data):
    """Every ``status``/``result`` string inside a ``dcgmi diag -j`` document, lower case."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            if key.lower() in ("status", "result") and isinstance(value, str):
                found.append(value.lower())
            else:
                found.extend(dcgm_statuses(value))
    elif isinstance(data, list):
        for item in data:
            found.extend(dcgm_statuses(item))
    return found


def busbw_threshold(model, linked_by_nvlink, thresholds):
    """(GB/s, source) for the NCCL all-reduce: the explicit ``min_busbw_gbps`` or the model table's value."""
    explicit = thresholds.get("min_busbw_gbps")
    if explicit not in (None, "", "auto"):
        return float(explicit), "verify_nccl_min_busbw_gbps"
    key = norm_model(model)
    table = thresholds.get("busbw_table") or {}
    for prefix in sorted(table, key=len, reverse=True):
        if key.startswith(norm_model(prefix)):
            kind = "nvlink" if linked_by_nvlink else "pcie"
            value = (table[prefix] or {}).get(kind)
            if value is not None:
                return float(value), "model table %s (%s)" % (prefix, kind)
    return None, None


class Ladder:
    """The ladder for one host. ``run`` and ``proc_root`` are injectable for tests."""

    def __init__(self, params, run=None, proc_root="/proc", path=None, systemd_dir="/run/systemd/system"):
        self.p = params
        self.nvml = params.get("nvml") or {}
        self.expected = params.get("expected") or {}
        self.run = run or Runner()
        self.proc_root = proc_root
        self.systemd_dir = systemd_dir
        self.path = path
        self.tool_dirs = params.get("tool_dirs") or []
        self.enabled = set(params.get("steps") or STEPS)
        self.gpus = [g for g in (self.nvml.get("gpus") or []) if not g.get("lost")]
        self.smi = find_tool("nvidia-smi", self.tool_dirs, path)

    # -- helpers
    def tool(self, name):
        return find_tool(name, self.tool_dirs, self.path)

    def available(self):
        return bool(self.nvml.get("available"))

    def nvlink_active(self):
        return any((g.get("nvlink") or {}).get("active_links") for g in self.gpus)

    def nvswitch(self):
        return bool(self.expected.get("nvswitch")) or bool(self.nvml.get("nvswitch_present"))

    def model(self):
        names = [g.get("name") for g in self.gpus if g.get("name")]
        return names[0] if names else self.expected.get("model")

    # -- steps
    def gpus_step(self):
        if not self.available():
            return step("gpus", "fail", {"error_name": self.nvml.get("error_name"), "error": self.nvml.get("error")},
                        "NVML is unavailable: %s" % self.nvml.get("error_name"))
        names = [g.get("name") for g in self.nvml.get("gpus") or []]
        evidence = {"count": self.nvml.get("count"), "names": names, "lost_gpus": self.nvml.get("lost_gpus") or [],
                    "expected_model": self.expected.get("model"), "expected_count": self.expected.get("count")}
        problems = gpu_problems(self.nvml, self.expected)
        return step("gpus", "fail" if problems else "pass", evidence, "; ".join(problems) or None)

    def nvidia_smi_step(self):
        if not self.smi:
            return step("nvidia_smi", "fail", {}, "nvidia-smi is not on PATH (nor in %s)" % ", ".join(self.tool_dirs))
        rc, out, err = self.run([self.smi, "-L"], 60)
        listed = [line for line in out.splitlines() if line.startswith("GPU ")]
        evidence = {"path": self.smi, "rc": rc, "gpus": listed, "stderr": err.strip()[-500:]}
        if rc != 0:
            return step("nvidia_smi", "fail", evidence,
                        "nvidia-smi -L exited %s: %s" % (rc, (err or out).strip()[-300:]))
        if self.available() and len(listed) != int(self.nvml.get("count") or 0):
            return step("nvidia_smi", "fail", evidence,
                        "nvidia-smi lists %d GPU(s), NVML %s" % (len(listed), self.nvml.get("count")))
        return step("nvidia_smi", "pass", evidence)

    def driver_version_step(self):
        if not self.available():
            return step("driver_version", "skip", {}, "NVML is unavailable")
        nvml = str(self.nvml.get("nvml_version") or "")
        evidence = {"driver_version": self.nvml.get("driver_version"), "nvml_version": nvml or None,
                    "nvml_library_driver": nvml.split(".", 1)[1] if "." in nvml else (nvml or None),
                    "kernel_module_version": self.nvml.get("kernel_module_version"),
                    "expected": self.expected.get("driver_version")}
        problems = driver_problems(self.nvml, self.expected)
        return step("driver_version", "fail" if problems else "pass", evidence, "; ".join(problems) or None)

    def persistence_step(self):
        if not self.available() or not self.gpus:
            return step("persistence", "skip", {}, "NVML is unavailable or lists no GPU")
        modes = {str(g.get("index")): g.get("persistence_mode") for g in self.gpus}
        off = persistence_off(self.nvml)
        reason = ("persistence mode is off on GPU(s) %s - enable nvidia-persistenced (or nvidia-smi -pm 1)" %
                  ", ".join(off)) if off else None
        return step("persistence", "fail" if off else "pass", {"persistence_mode": modes}, reason)

    def fabric_manager_step(self):
        evidence = {"nvswitch_expected": bool(self.expected.get("nvswitch")),
                    "nvswitch_present": self.nvml.get("nvswitch_present"),
                    "fabric": {str(g.get("index")): g.get("fabric") for g in self.gpus}}
        if nvswitch_system(self.nvml, self.expected):
            evidence["daemons"] = running_daemons(self.proc_root)
        status, reason = fabric_manager(self.nvml, self.expected, evidence.get("daemons"))
        return step("fabric_manager", status, evidence, reason)

    def services_step(self):
        states = service_states(lambda argv: self.run(argv, 60)[:2], self.systemd_dir)
        if states is None:
            return step("services", "skip", {}, "systemd is not the init here (no %s): no unit to read"
                        % self.systemd_dir)
        problems = stopped_services(states)
        return step("services", "fail" if problems else "pass", {"services": states},
                    "; ".join(problem for _, problem in problems) or None)

    def mig_step(self):
        want = self.p.get("mig") or {}
        layout = want.get("layout")
        if unset(layout):
            return step("mig", "skip", {}, "MIG is not managed here (mig.layout is null)")
        if not self.available() or not self.gpus:
            return step("mig", "fail", {"layout": layout}, "NVML is unavailable or lists no GPU: the MIG layout "
                        "%s cannot be read" % layout)
        modes = {g.get("index"): (g.get("mig") or {}).get("current") for g in self.gpus}
        desired, problem = desired_layout(layout, want.get("layouts"), list(modes))
        if desired is None:
            return step("mig", "fail", {"layout": layout}, problem)
        evidence = {"layout": layout, "desired": desired, "mig_enabled": {str(k): v for k, v in modes.items()}}
        instances = {}
        if any(modes.values()):
            if not self.smi:
                return step("mig", "fail", evidence, "nvidia-smi is not on PATH: the GPU instances cannot be listed")
            rc, out, err = self.run([self.smi, "mig", "-lgi"], 60)
            if rc != 0 and "No GPU instances found" not in out + err:
                evidence["stderr"] = (err or out).strip()[-500:]
                return step("mig", "fail", evidence, "nvidia-smi mig -lgi exited %s: %s"
                            % (rc, (err or out).strip()[-300:]))
            instances = parse_mig_instances(out)
        evidence["instances"] = {str(k): v for k, v in instances.items()}
        problems = layout_problems(desired, modes, instances)
        if problems:
            problems[-1] += " - apply the layout: gpuprov apply FLEET --tags mig"
        return step("mig", "fail" if problems else "pass", evidence, "; ".join(problems) or None)

    def cuda_sample_step(self):
        nvcc = self.tool("nvcc")
        if not nvcc:
            return step("cuda_sample", "skip", {}, "no CUDA toolkit: nvcc is not on PATH or in %s" %
                        ", ".join(self.tool_dirs))
        if not self.gpus:
            return step("cuda_sample", "skip", {"nvcc": nvcc}, "NVML lists no usable GPU")
        workdir = self.p["workdir"]
        source = os.path.join(workdir, "gpuprov_cuda_sample.cu")
        binary = os.path.join(workdir, "gpuprov_cuda_sample")
        caps = sorted({str(g.get("compute_capability")) for g in self.gpus if g.get("compute_capability")})
        argv = [nvcc, "-o", binary, source]
        for cap in caps:
            arch = cap.replace(".", "")
            argv[1:1] = ["-gencode", "arch=compute_%s,code=[sm_%s,compute_%s]" % (arch, arch, arch)]
        rc, out, err = self.run(argv, 300)
        evidence = {"nvcc": nvcc, "compile_argv": argv, "compile_rc": rc}
        if rc != 0:
            evidence["compile_output"] = (out + err).strip()[-1500:]
            return step("cuda_sample", "fail", evidence, "nvcc could not build the sample (rc %s)" % rc)
        rc, out, err = self.run([binary], 120)
        evidence.update({"run_rc": rc, "output": (out + err).strip()[-1500:]})
        if rc == 0 and "RESULT PASS" in out:
            return step("cuda_sample", "pass", evidence)
        result = [line for line in out.splitlines() if line.startswith("RESULT")]
        return step("cuda_sample", "fail", evidence, (result[-1] if result else "sample exited %s" % rc))

    def p2p_step(self):
        if len(self.gpus) < 2:
            return step("p2p", "skip", {"gpus": len(self.gpus)}, "fewer than 2 GPUs: no pair to check")
        if not self.smi:
            return step("p2p", "skip", {}, "nvidia-smi is missing: nvidia-smi topo -p2p reads nvmlDeviceGetP2PStatus")
        matrices = {}
        for mode, label in (("r", "read"), ("w", "write"), ("n", "nvlink")):
            rc, out, err = self.run([self.smi, "topo", "-p2p", mode], 60)
            matrices[label] = parse_p2p_matrix(out) if rc == 0 else {"error": (err or out).strip()[-300:]}
        links = {str(g.get("index")): (g.get("nvlink") or {}).get("active_links") for g in self.gpus}
        evidence = {"p2p": matrices, "nvlink_active_links": links}
        problems = []
        for label in ("read", "write"):
            bad = {k: v for k, v in matrices[label].items() if v != "OK"}
            if bad or not matrices[label]:
                problems.append("P2P %s not OK: %s" % (label, ", ".join("%s %s" % (k, P2P_STATUS.get(v, v))
                                                                       for k, v in sorted(bad.items())) or "no matrix"))
        nvlink_expected = self.nvlink_active() or self.nvswitch()
        nv_bad = {k: v for k, v in matrices["nvlink"].items() if v != "OK"}
        evidence["nvlink_expected"] = nvlink_expected
        if nvlink_expected and (nv_bad or not matrices["nvlink"]):
            problems.append("NVLink P2P not OK between %s (NVLink links are active): check Fabric Manager and "
                            "nvidia-smi nvlink -s" % (", ".join(sorted(nv_bad)) or "all pairs"))
        return step("p2p", "fail" if problems else "pass", evidence, "; ".join(problems) or None)

    def find_torch_python(self):
        explicit = self.p.get("python")
        candidates = [explicit] if explicit else python_candidates(self.tool_dirs, self.path)
        tried = []
        for candidate in candidates:
            rc, out, _err = self.run([candidate, "-c", "import torch, sys; print(torch.__version__)"], 120)
            tried.append({"python": candidate, "rc": rc, "torch": out.strip() if rc == 0 else None})
            if rc == 0:
                return candidate, tried
        return None, tried

    def nccl_step(self):
        if len(self.gpus) < 2:
            return step("nccl_allreduce", "skip", {"gpus": len(self.gpus)}, "fewer than 2 GPUs: no all-reduce")
        python, tried = self.find_torch_python()
        if not python:
            return step("nccl_allreduce", "skip", {"tried": tried}, "no Python with torch on this host (set "
                        "verify_python to one)")
        nccl = self.p.get("nccl") or {}
        script = os.path.join(self.p["workdir"], "gpuprov_nccl_allreduce.py")
        argv = [python, script, "--size-bytes", str(int(nccl.get("size_bytes") or 1 << 30)),
                "--iters", str(int(nccl.get("iters") or 20)), "--warmup", str(int(nccl.get("warmup") or 5))]
        rc, out, err = self.run(argv, int(nccl.get("timeout_s") or 600),
                                env={str(k): str(v) for k, v in (nccl.get("env") or {}).items()})
        evidence = {"python": python, "argv": argv, "rc": rc}
        lines = [line for line in out.splitlines() if line.startswith("{")]
        try:
            result = json.loads(lines[-1]) if lines else None
        except ValueError:
            result = None
        if rc != 0 or result is None:
            evidence["output"] = (out + err).strip()[-1500:]
            return step("nccl_allreduce", "fail", evidence, "the all-reduce script failed (rc %s)" % rc)
        evidence["result"] = result
        if not result.get("available"):
            return step("nccl_allreduce", "skip", evidence, result.get("reason"))
        if not result.get("correct"):
            return step("nccl_allreduce", "fail", evidence, "all-reduce returned a wrong sum")
        linked = self.nvlink_active() or self.nvswitch()
        minimum, source = busbw_threshold(self.model(), linked, self.p.get("thresholds") or {})
        evidence.update({"min_busbw_gbps": minimum, "threshold_source": source})
        busbw = float(result.get("busbw_gbps") or 0)
        if minimum is None:
            return step("nccl_allreduce", "pass", evidence, "no bus-bandwidth threshold for %s: set "
                        "verify_nccl_min_busbw_gbps; the sum was right" % self.model())
        if busbw < minimum:
            return step("nccl_allreduce", "fail", evidence, "bus bandwidth %.1f GB/s is below %.1f GB/s (%s)" %
                        (busbw, minimum, source))
        return step("nccl_allreduce", "pass", evidence)

    def container_step(self):
        docker = self.tool("docker")
        conf = self.p.get("container") or {}
        image = conf.get("image")
        if not docker:
            return step("container", "skip", {}, "docker is not installed")
        if not image:
            return step("container", "skip", {"docker": docker}, "no image set (verify_container_image)")
        rc, out, err = self.run([docker, "image", "inspect", image], 60)
        evidence = {"docker": docker, "image": image, "image_present": rc == 0}
        if rc is None or (rc != 0 and "Cannot connect" in err):
            evidence["error"] = err.strip()[-500:]
            return step("container", "fail", evidence, "docker does not answer: %s" % err.strip()[-200:])
        if rc != 0 and not conf.get("pull"):
            return step("container", "skip", evidence, "image %s is not present and verify_container_pull is "
                        "false" % image)
        argv = [docker, "run", "--rm", "--gpus", "all", image, "nvidia-smi", "-L"]
        rc, out, err = self.run(argv, int(conf.get("timeout_s") or 300))
        listed = [line for line in out.splitlines() if line.startswith("GPU ")]
        evidence.update({"argv": argv, "rc": rc, "gpus": listed, "stderr": err.strip()[-800:]})
        if rc != 0:
            return step("container", "fail", evidence, "docker run --gpus all failed (rc %s): %s" %
                        (rc, err.strip()[-300:]))
        if len(listed) != len(self.gpus):
            return step("container", "fail", evidence, "the container sees %d GPU(s), the host %d" %
                        (len(listed), len(self.gpus)))
        return step("container", "pass", evidence)

    def dcgm_step(self):
        dcgmi = self.tool("dcgmi")
        if not dcgmi:
            return step("dcgm_diag", "skip", {}, "DCGM is not installed (no dcgmi)")
        conf = self.p.get("dcgm") or {}
        level = str(conf.get("level") or 1)
        argv = [dcgmi, "diag", "-r", level, "-j"]
        rc, out, err = self.run(argv, int(conf.get("timeout_s") or 600))
        evidence = {"argv": argv, "rc": rc}
        try:
            data = json.loads(out)
        except ValueError:
            data = None
        statuses = dcgm_statuses(data) if data is not None else []
        evidence["results"] = {s: statuses.count(s) for s in sorted(set(statuses))}
        if data is None:
            evidence["output"] = (out + err).strip()[-1000:]
            return step("dcgm_diag", "fail", evidence, "dcgmi diag -r %s gave no JSON (rc %s): is nv-hostengine "
                        "running?" % (level, rc))
        failed = [s for s in statuses if s in ("fail", "failed", "error")]
        if failed or rc not in (0,):
            return step("dcgm_diag", "fail", evidence, "DCGM diagnostic level %s: %d failed test result(s), rc %s"
                        % (level, len(failed), rc))
        return step("dcgm_diag", "pass", evidence)

    def run_all(self):
        """Run every enabled step in ladder order; a step that raises is a fail with the error as reason."""
        methods = {"gpus": self.gpus_step, "nvidia_smi": self.nvidia_smi_step,
                   "driver_version": self.driver_version_step, "persistence": self.persistence_step,
                   "fabric_manager": self.fabric_manager_step, "services": self.services_step,
                   "mig": self.mig_step, "cuda_sample": self.cuda_sample_step,
                   "p2p": self.p2p_step, "nccl_allreduce": self.nccl_step, "container": self.container_step,
                   "dcgm_diag": self.dcgm_step}
        steps = []
        for name in STEPS:
            if name not in self.enabled:
                steps.append(step(name, "skip", {}, "not selected (verify_steps)"))
                continue
            start = time.monotonic()
            try:
                result = methods[name]()
            except Exception as exc:
                result = step(name, "fail", {}, "internal error: %s: %s" % (type(exc).__name__, exc))
            result["duration_s"] = round(time.monotonic() - start, 2)
            steps.append(result)
        return report(steps)


def report(steps):
    """``{status, summary {pass, fail, skip}, steps}``; status is fail when any step failed."""
    summary = {"pass": 0, "fail": 0, "skip": 0}
    for entry in steps:
        summary[entry["status"]] = summary.get(entry["status"], 0) + 1
    return {"status": "fail" if summary["fail"] else "pass", "summary": summary, "steps": steps}


def main():
    """Run the ladder and return the report; never changes the host outside ``workdir``."""
    module = AnsibleModule(
        argument_spec={
            "nvml": {"type": "dict", "required": True},
            "workdir": {"type": "path", "required": True},
            "expected": {"type": "dict", "default": {}},
            "thresholds": {"type": "dict", "default": {}},
            "steps": {"type": "list", "elements": "str", "default": list(STEPS)},
            "tool_dirs": {"type": "list", "elements": "path", "default": []},
            "python": {"type": "str", "default": ""},
            "nccl": {"type": "dict", "default": {}},
            "container": {"type": "dict", "default": {}},
            "dcgm": {"type": "dict", "default": {}},
            "mig": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    unknown = sorted(set(module.params["steps"]) - set(STEPS))
    if unknown:
        module.fail_json(msg="unknown verify step(s) %s: choose from %s" % (", ".join(unknown), ", ".join(STEPS)))
    module.exit_json(changed=False, report=Ladder(module.params).run_all())


if __name__ == "__main__":
    main()
