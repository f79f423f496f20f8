# Copyright: gpuprov contributors
# Apache-2.0
"""The verification ladder's rungs that run work on the GPUs: a CUDA sample built with nvcc, peer-to-peer
status between GPUs, an NCCL all-reduce through torch (with the bus-bandwidth threshold), a container with
``--gpus all`` (and, where Docker reads CDI specifications, with ``--device nvidia.com/gpu=all``) and the DCGM
diagnostic, and the parsers of those tools' output. Python 3.8, stdlib only.

:class:`WorkloadSteps` is mixed into :class:`~ladder.Ladder`; what its rungs read is
:class:`~ladder_state.LadderState`'s.
"""


from __future__ import annotations

import json
import os
import re
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.cdi import parse_cdi_list
from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_model
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_result import step
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_state import LadderState
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_tools import python_candidates

#: ``nvidia-smi topo -p2p`` cell values (nvmlDeviceGetP2PStatus' NVML_P2P_STATUS_* under the CLI).
P2P_STATUS = {"OK": "ok", "CNS": "chipset not supported", "GNS": "GPU not supported",
              "TNS": "topology not supported", "NS": "not supported", "U": "unknown", "DR": "disabled by regkey"}


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


class WorkloadSteps(LadderState):
    """The rungs ``cuda_sample`` to ``dcgm_diag``; each returns a :func:`~ladder_result.step`."""

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
        evidence: dict[str, Any] = {"p2p": matrices, "nvlink_active_links": links}
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
            return step("nccl_allreduce", "skip", {"tried": tried}, "no Python with torch on this host (set one "
                        "in the fleet file's verify.python; role variable verify_python)")
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
            return step("container", "skip", {"docker": docker},
                        "no image set (fleet file: verify.container_image; role variable verify_container_image)")
        rc, out, err = self.run([docker, "image", "inspect", image], 60)
        evidence = {"docker": docker, "image": image, "image_present": rc == 0}
        if rc is None or (rc != 0 and "Cannot connect" in err):
            evidence["error"] = err.strip()[-500:]
            return step("container", "fail", evidence, "docker does not answer: %s" % err.strip()[-200:])
        if rc != 0 and not conf.get("pull"):
            return step("container", "skip", evidence, "image %s is not present and pulling is off (fleet file: "
                        "verify.container_pull; role variable verify_container_pull)" % image)
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
        evidence["cdi"] = cdi = self.cdi_container(docker, image, int(conf.get("timeout_s") or 300))
        if cdi.get("fail"):
            return step("container", "fail", evidence, cdi["fail"])
        return step("container", "pass", evidence)

    def cdi_container(self, docker, image, timeout):
        """The same query with the GPUs given by CDI name, where Docker reads CDI specifications (Docker 25+
        with features.cdi) and ``nvidia-ctk cdi list`` names nvidia.com/gpu=all; else why it did not run."""
        rc, out, _err = self.run([docker, "info", "--format", "{{json .CDISpecDirs}}"], 60)
        try:
            dirs = json.loads(out) if rc == 0 else None
        except ValueError:
            dirs = None
        if not dirs:
            return {"ran": False, "reason": "Docker reads no CDI specifications (features.cdi off, or before 25.0)"}
        ctk = self.tool("nvidia-ctk")
        rc, out, err = self.run([ctk, "cdi", "list"], 60) if ctk else (None, "", "")
        if "all" not in parse_cdi_list(out + "\n" + err):
            return {"ran": False, "spec_dirs": dirs, "reason": "nvidia-ctk cdi list names no nvidia.com/gpu=all"}
        argv = [docker, "run", "--rm", "--device", "nvidia.com/gpu=all", image, "nvidia-smi", "-L"]
        rc, out, err = self.run(argv, timeout)
        listed = [line for line in out.splitlines() if line.startswith("GPU ")]
        result = {"ran": True, "spec_dirs": dirs, "argv": argv, "rc": rc, "gpus": listed}
        if rc != 0:
            result["fail"] = "docker run --device nvidia.com/gpu=all failed (rc %s): %s" % (rc, err.strip()[-300:])
        elif len(listed) != len(self.gpus):
            result["fail"] = "the CDI container sees %d GPU(s), the host %d" % (len(listed), len(self.gpus))
        return result

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
