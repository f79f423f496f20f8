# Copyright: gpuprov contributors
# Apache-2.0
"""What every rung of the verification ladder reads: the module's parameters, NVML's reading of the host, the
fleet file's expectations, the tools found on the host, and the helpers built on them. :class:`LadderState` is
the base of both rung mixins (``ladder_host_steps.HostSteps``, ``ladder_workload_steps.WorkloadSteps``) and so of
:class:`~ladder.Ladder`. Python 3.8, stdlib only."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_tools import Runner, find_tool

#: The rungs, in the order they run (gpuprov/fleet/schema.py repeats them as VerifyStep for the fleet file).
STEPS = ("gpus", "nvidia_smi", "driver_version", "persistence", "fabric_manager", "services", "mig", "cuda_sample",
         "p2p", "nccl_allreduce", "container", "dcgm_diag")


class LadderState:
    """One host's inputs to the ladder. ``run`` (a :class:`~ladder_tools.Runner`), ``proc_root``, ``path`` and
    ``systemd_dir`` are injectable for tests.

    Attributes: ``p`` the module's parameters; ``nvml`` the ``gpuprov_gpus`` fact; ``expected`` the fleet file's
    ``{model, count, nvswitch, ...}``; ``gpus`` NVML's GPUs less the lost ones; ``tool_dirs`` extra directories
    searched for tools; ``smi`` the path of ``nvidia-smi`` or ``None``; ``enabled`` the selected rungs.
    """

    def __init__(self, params: dict[str, Any], run: Any = None, proc_root: str = "/proc", path: str | None = None,
                 systemd_dir: str = "/run/systemd/system") -> None:
        self.p = params
        self.nvml: dict[str, Any] = params.get("nvml") or {}
        self.expected: dict[str, Any] = params.get("expected") or {}
        self.run = run or Runner()
        self.proc_root = proc_root
        self.systemd_dir = systemd_dir
        self.path = path
        self.tool_dirs: list[str] = params.get("tool_dirs") or []
        self.enabled = set(params.get("steps") or STEPS)
        self.gpus: list[dict[str, Any]] = [g for g in (self.nvml.get("gpus") or []) if not g.get("lost")]
        self.smi = find_tool("nvidia-smi", self.tool_dirs, path)

    def tool(self, name: str) -> str | None:
        """The path of tool ``name`` on PATH or in ``tool_dirs``, or ``None``."""
        return find_tool(name, self.tool_dirs, self.path)

    def available(self) -> bool:
        return bool(self.nvml.get("available"))

    def nvlink_active(self) -> bool:
        return any((g.get("nvlink") or {}).get("active_links") for g in self.gpus)

    def nvswitch(self) -> bool:
        return bool(self.expected.get("nvswitch")) or bool(self.nvml.get("nvswitch_present"))

    def model(self) -> str | None:
        names = [g.get("name") for g in self.gpus if g.get("name")]
        return names[0] if names else self.expected.get("model")
