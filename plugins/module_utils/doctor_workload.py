# Copyright: gpuprov contributors
# Apache-2.0
"""gpuprov doctor rules on the work running on the GPUs: utilisation swinging between idle and busy (an input
pipeline that cannot keep up) and processes left holding /dev/nvidia*. Pure Python 3.8, no Ansible, no I/O;
:func:`~doctor.diagnose` calls :func:`check_utilisation` and :func:`check_holders`."""


from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_gpus import gpu_label
from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import usable_gpus

#: Utilisation swinging (data starvation), over at least MIN_SAMPLES samples of one GPU: the standard
#: deviation is at least SWING_STDEV points, some sample reaches BUSY_PCT and the samples at or below IDLE_PCT
#: make up at least LOW_SHARE of the window. Assumption, not a vendor number: a GPU fed fast enough stays
#: near its mean; a starved one alternates bursts with idle gaps while the next batch loads.
MIN_SAMPLES = 5
SWING_STDEV = 25.0
BUSY_PCT = 70
IDLE_PCT = 10
LOW_SHARE = 0.3

#: Processes that hold /dev/nvidia* by design and are never stale.
DAEMONS = ("nvidia-persiste", "nvidia-persistenced", "nv-fabricmanager", "nv-hostengine", "nvidia-smi", "dcgm")


def _stdev(values):
    mean = sum(values) / float(len(values))
    return (sum((v - mean) ** 2 for v in values) / float(len(values))) ** 0.5


def swinging(values):
    """True when utilisation samples swing between bursts and long idle periods (thresholds above)."""
    values = [v for v in values if isinstance(v, (int, float))]
    if len(values) < MIN_SAMPLES:
        return False
    low = sum(1 for v in values if v <= IDLE_PCT) / float(len(values))
    return _stdev(values) >= SWING_STDEV and max(values) >= BUSY_PCT and low >= LOW_SHARE


def check_utilisation(facts, out):
    """utilization_swinging, per GPU whose samples swing (:func:`swinging`)."""
    samples = facts.get("samples") or {}
    by_index = {str(g.get("index")): g for g in usable_gpus(facts.get("nvml"))}
    for index, values in sorted((samples.get("gpus") or {}).items()):
        if not swinging(values):
            continue
        gpu = by_index.get(str(index)) or {"index": index}
        out.add(
            "utilization_swinging",
            "warn",
            gpu.get("pci_bus_id_sysfs") or "gpu%s" % index,
            "%s utilisation over %ss swings between idle and busy (data starvation): %s"
            % (gpu_label(gpu), samples.get("window_s"), ", ".join("%d%%" % v for v in values)),
            "the input pipeline cannot keep the GPU fed: raise DataLoader num_workers and prefetch, pin host "
            "memory, decode on the GPU (DALI), keep the dataset on local NVMe, and watch CPU usage while training",
        )


def check_holders(facts, out):
    """stale_device_holder, per process holding /dev/nvidia* that is no daemon and has no NVML work."""
    holders = facts.get("holders")
    if holders is None:
        return
    known = facts.get("nvml_pids")
    for proc in holders:
        command = str(proc.get("command") or "?")
        if command.startswith(DAEMONS) or (known is not None and proc.get("pid") in known):
            continue
        out.add(
            "stale_device_holder",
            "warn" if known is not None else "info",
            "pid %s" % proc.get("pid"),
            "process %s (%s) holds %s but %s"
            % (
                proc.get("pid"),
                command,
                ", ".join(proc.get("devices") or ["/dev/nvidia*"]),
                "NVML lists no GPU work for it (left over from an interrupted job?)"
                if known is not None
                else "NVML's process list is not collected here",
            ),
            "check it with fuser -v /dev/nvidia* and ps -o pid,etime,cmd -p %s; if it is a dead job's leftover: "
            "kill %s (kill -9 %s if it ignores TERM); the GPU memory is freed when it exits"
            % (proc.get("pid"), proc.get("pid"), proc.get("pid")),
        )

