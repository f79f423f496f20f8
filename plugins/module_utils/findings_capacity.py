# Copyright: gpuprov contributors
# Apache-2.0
"""bios_check rules on the host's capacity around the GPUs: RAM, rotational disks and the PSU's headroom over
the GPUs' power limits and the CPUs. Pure Python 3.8, no Ansible; :func:`~findings.evaluate` calls
:func:`check_capacity`."""


from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import usable_gpus

GIB = 1024**3


def _gib(value):
    return "%.1f GiB" % (value / GIB) if isinstance(value, (int, float)) else "n/a"


def check_capacity(out, platform, gpus, s):
    """ram_*, disk_rotational and psu_* findings."""
    total = (platform.get("ram") or {}).get("total_bytes")
    min_gb = s.get("min_ram_gb") or 64
    if not isinstance(total, int):
        out.add("ram_unknown", "info", "ram", "cannot read MemTotal", "none")
    elif total < min_gb * 10**9 * 0.95:  # MemTotal excludes firmware/kernel reservations
        out.add(
            "ram_low",
            "warn",
            "ram",
            "%.1f GB of RAM, below %d GB" % (total / 10**9, min_gb),
            "add memory: image pipelines stage batches in host RAM (at least %d GB)" % min_gb,
        )
    for disk in platform.get("disks") or []:
        if disk.get("rotational") and not disk.get("removable") and (disk.get("size_bytes") or 0) > 0:
            out.add(
                "disk_rotational",
                "warn",
                disk["name"],
                "/dev/{} is a rotational disk ({})".format(disk["name"], _gib(disk.get("size_bytes"))),
                "keep image data and caches on NVMe; use rotational disks only for cold storage",
            )
    psu = s.get("psu_watts")
    gpu_w = [g.get("enforced_power_limit_w") or g.get("power_limit_w") for g in usable_gpus(gpus)]
    gpu_w = [float(w) for w in gpu_w if isinstance(w, (int, float))]
    if not psu:
        out.add(
            "psu_unknown",
            "info",
            "psu",
            "psu_watts is not set in the fleet file"
            + ("; GPUs draw up to %d W" % int(sum(gpu_w)) if gpu_w else " (and NVML gives no GPU power limit)"),
            "set psu_watts for this host so the headroom can be checked",
        )
        return
    need = sum(gpu_w) + float(s.get("cpu_tdp_watts") or 0)
    headroom = s.get("psu_headroom_pct")
    headroom = 25 if headroom is None else headroom
    if gpu_w and psu < need * (1 + headroom / 100.0):
        out.add(
            "psu_headroom",
            "fail",
            "psu",
            "PSU %d W vs %d W (GPU power limits %s W + CPU %s W): needs %d%% headroom, i.e. %d W"
            % (
                psu,
                need,
                "+".join("%d" % w for w in gpu_w),
                s.get("cpu_tdp_watts"),
                headroom,
                need * (1 + headroom / 100.0),
            ),
            "fit a larger PSU, or lower the GPU power limits (nvidia-smi -pl) and say so in psu_watts",
        )

