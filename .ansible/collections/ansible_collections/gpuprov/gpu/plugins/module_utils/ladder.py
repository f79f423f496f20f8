# Copyright: gpuprov contributors
# Apache-2.0
"""The verification ladder of one GPU host (the ``verify_ladder`` module): :data:`STEPS` in order, each a
method of :class:`Ladder`, which mixes in the rungs of ``ladder_host_steps`` (the GPU stack) and
``ladder_workload_steps`` (work on the GPUs) over their common inputs (``ladder_state``). Python 3.8, stdlib
only; ``run`` and ``proc_root`` are injectable for tests."""


from __future__ import annotations

import time

from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_host_steps import HostSteps
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_result import report, step
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_state import STEPS
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_workload_steps import WorkloadSteps

__all__ = ["STEPS", "Ladder"]


class Ladder(HostSteps, WorkloadSteps):
    """The ladder for one host (:class:`~ladder_state.LadderState`'s inputs, every rung)."""

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
                steps.append(step(name, "skip", {},
                                  "not selected (fleet file: verify.skip; role variable verify_steps)"))
                continue
            start = time.monotonic()
            try:
                result = methods[name]()
            except Exception as exc:
                result = step(name, "fail", {}, "internal error: %s: %s" % (type(exc).__name__, exc))
            result["duration_s"] = round(time.monotonic() - start, 2)
            steps.append(result)
        return report(steps)
