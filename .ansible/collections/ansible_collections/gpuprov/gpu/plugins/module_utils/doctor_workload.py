# Copyright: gpuprov contributors
# Apache-2.0
"""gpuprov doctor rules on the work running on the GPUs: utilisation swinging between idle and busy (an input
pipeline that cannot keep up) and processes left holding /dev/nvidia* or GPU memory, with the services that hold
them by design (:func:`known_service`). Pure Python 3.8, no Ansible, no I/O; :func:`~doctor.diagnose` calls
:func:`check_utilisation` and :func:`check_holders`."""


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

#: Processes that hold /dev/nvidia* by design and are never stale (process names; the kernel keeps 15 characters,
#: hence "nvidia-persiste"). "dcgm" covers dcgm-exporter and dcgmi.
DAEMONS = ("nvidia-persiste", "nvidia-persistenced", "nv-fabricmanager", "nv-hostengine", "nvidia-smi", "dcgm")

#: systemd units whose processes hold the GPUs by design: the NVIDIA daemons, DCGM and its exporter (the
#: monitoring role) and gpuprov's image workers (the image_workers role), found in /proc/<pid>/cgroup.
KNOWN_UNITS = ("nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-dcgm.service",
               "dcgm-exporter.service", "gpuprov-worker@")

#: cgroup path parts of containers (Docker, containerd, CRI-O, Podman, Kubernetes): their runtime owns the
#: processes' lifetime, so doctor never calls them left over.
CONTAINER_CGROUPS = ("docker", "containerd", "crio-", "libpod-", "kubepods")


def known_service(command: str | None, cgroup: str = "") -> str | None:
    """Why a process with this name and /proc/<pid>/cgroup text holds the GPU by design, or None."""
    if str(command or "").startswith(DAEMONS):
        return "NVIDIA daemon %s" % command
    for unit in KNOWN_UNITS:
        if unit in (cgroup or ""):
            return "service %s" % unit.rstrip("@")
    for marker in CONTAINER_CGROUPS:
        if marker in (cgroup or ""):
            return "container (its runtime manages it)"
    return None


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


def _held(proc):
    """'/dev/nvidia0, /dev/nvidiactl and 3072 MiB of GPU memory': what a holder holds."""
    used = proc.get("gpu_memory_bytes")
    parts = [", ".join(proc.get("devices") or [])] if proc.get("devices") else []
    if isinstance(used, int) and used > 0:
        parts.append("%d MiB of GPU memory" % (used // 2**20))
    return " and ".join(parts) or "the GPU"


def check_holders(facts, out):
    """leftover_gpu_process per holder whose job has ended (its process group leader is gone); stale_device_holder
    per other holder of /dev/nvidia* that NVML lists no work for. Known services (:func:`known_service`) are never
    reported."""
    holders = facts.get("holders")
    if holders is None:
        return
    known = facts.get("nvml_pids")
    for proc in holders:
        command = str(proc.get("command") or "?")
        pid = proc.get("pid")
        if proc.get("allowed") or known_service(command):
            continue
        if proc.get("job_ended"):
            out.add(
                "leftover_gpu_process",
                "warn",
                "pid %s" % pid,
                "process %s (user %s: %s) holds %s, but its job has ended (process group %s has no leader "
                "left)" % (pid, proc.get("user") or "?", proc.get("cmdline") or command, _held(proc), proc.get("pgid")),
                "gpuprov doctor --fix ends it after confirmation (SIGTERM, then SIGKILL); by hand: kill %s "
                "(kill -9 %s if it ignores TERM); the GPU memory is freed when it exits" % (pid, pid),
            )
            continue
        if known is not None and pid in known:
            continue
        out.add(
            "stale_device_holder",
            "warn" if known is not None else "info",
            "pid %s" % pid,
            "process %s (%s) holds %s but %s"
            % (
                pid,
                command,
                ", ".join(proc.get("devices") or []) or "/dev/nvidia*",
                "NVML lists no GPU work for it (left over from an interrupted job?)"
                if known is not None
                else "NVML's process list is not collected here",
            ),
            "check it with fuser -v /dev/nvidia* and ps -o pid,etime,cmd -p %s; if it is a dead job's leftover: "
            "kill %s (kill -9 %s if it ignores TERM); the GPU memory is freed when it exits" % (pid, pid, pid),
        )
