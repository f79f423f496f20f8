# Copyright: gpuprov contributors
# Apache-2.0
"""The verification ladder's rungs that read the host's GPU stack: NVML's GPUs against the fleet file,
``nvidia-smi -L``, driver versions, persistence mode, Fabric Manager, the stack's services and the MIG layout.
The rules they apply are module_utils/health.py's and miglayout.py's, shared with gpuprov doctor. Python 3.8,
stdlib only.

:class:`HostSteps` is mixed into :class:`~ladder.Ladder`; what its rungs read is
:class:`~ladder_state.LadderState`'s.
"""


from __future__ import annotations

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
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_result import step
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_state import LadderState
from ansible_collections.gpuprov.gpu.plugins.module_utils.miglayout import (
    desired_layout,
    layout_problems,
    parse_mig_instances,
    unset,
)


class HostSteps(LadderState):
    """The rungs ``gpus`` to ``mig``; each returns a :func:`~ladder_result.step`."""

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
