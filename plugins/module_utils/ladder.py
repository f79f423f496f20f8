# Copyright: gpuprov contributors
# Apache-2.0
"""The verification ladder of one GPU host (the ``verify_ladder`` module): :data:`STEPS` in order, each a
method of :class:`Ladder`, which mixes in the rungs of ``ladder_host_steps`` (the GPU stack) and
``ladder_workload_steps`` (work on the GPUs). Python 3.8, stdlib only; ``run`` and ``proc_root`` are
injectable for tests."""


from __future__ import annotations

import time

from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_host_steps import HostSteps
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_result import report, step
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_tools import Runner, find_tool
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_workload_steps import WorkloadSteps

#: The rungs, in the order they run (gpuprov/fleet/schema.py repeats them as VerifyStep for the fleet file).
STEPS = ("gpus", "nvidia_smi", "driver_version", "persistence", "fabric_manager", "services", "mig", "cuda_sample",
         "p2p", "nccl_allreduce", "container", "dcgm_diag")


class Ladder(HostSteps, WorkloadSteps):
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
