"""The devices workers are pinned to (slots): ``--gpus`` resolved through NVML, replicated per GPU, and
each worker's check that CUDA opened the device it was assigned.

Pinning: the supervisor resolves ``--gpus`` to NVML devices and starts each worker with
``CUDA_VISIBLE_DEVICES=GPU-<uuid>`` (never an index) and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Each worker
then reads the UUID and PCI bus id of the device CUDA actually opened and exits with code 4 on a
mismatch instead of running on the wrong GPU. Without NVML or GPUs the workers run on ``cpu``.

Several processes per GPU (:func:`replicate`, ``procs_per_gpu``): every process of a GPU gets the same
UUID pin and the same self-check; they share the queue like workers on different GPUs do (leases make
that safe) and split the GPU's free memory for ``--batch auto``. One worker's Python thread issued
every per-image operation (nvJPEG list decode, canvas copies, result rows) and was the limit on an
H200 (docs/benchmarks.md); :data:`DEFAULT_PROCS_PER_GPU` processes spread that work.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.images.lazy_torch import torch_modules

log = logging.getLogger(__name__)

DEFAULT_PROCS_PER_GPU = 4
"""Worker processes per GPU of :func:`replicate` when its caller gives none (benchmarks, library use).
``gpuprov images run`` chooses its own from the machine (:func:`gpuprov.images.sizing.fast_defaults`)."""


class DeviceMismatch(EnvironmentMissing):
    """The device CUDA opened is not the one this worker was assigned. Exit 4."""


@dataclass(frozen=True)
class Slot:
    """One device a worker is pinned to: ``name`` (``gpu0``, ``gpu0.1`` for a replica, ``cpu0``), and the
    ``uuid`` (``GPU-...``), PCI ``bus_id`` (``00000000:01:00.0``) and total ``memory_bytes`` NVML gives, all None
    for a CPU slot (the memory also where NVML does not tell it)."""

    name: str
    uuid: str | None = None
    bus_id: str | None = None
    share: int = 1  # worker processes pinned to this device (they split its free memory)
    memory_bytes: int | None = None


def resolve_slots(gpus: str, cpu_workers: int = 1, nvml: Any = None) -> list[Slot]:
    """``--gpus all|cpu|0,1|GPU-uuid,...`` to slots; NVML indices are PCI bus order, as nvidia-smi's."""
    cpu = [Slot(f"cpu{i}") for i in range(cpu_workers)]
    if gpus == "cpu":
        return cpu
    try:
        nvml = nvml if nvml is not None else importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError, ImportError: no GPU here
        if gpus != "all":
            raise EnvironmentMissing(
                f"--gpus {gpus}: NVML is unavailable ({exc}); is the NVIDIA driver loaded? (--gpus cpu runs on the CPU)"
            ) from exc
        log.warning("--gpus all: NVML is unavailable (%s); running on the CPU", exc)
        return cpu
    try:
        found = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid, bus = nvml.nvmlDeviceGetUUID(h), nvml.nvmlDeviceGetPciInfo(h).busId
            found.append(Slot(f"gpu{i}", _text(uuid), _text(bus), memory_bytes=_memory(nvml, h)))
    finally:
        nvml.nvmlShutdown()
    if not found:
        if gpus != "all":
            raise EnvironmentMissing(f"--gpus {gpus}: NVML sees no GPU (--gpus cpu runs on the CPU)")
        log.warning("--gpus all: NVML sees no GPU; running on the CPU")
        return cpu
    if gpus == "all":
        return found
    picked: list[Slot] = []
    for token in gpus.split(","):
        match = [s for s in found if token.strip() in (s.name[3:], s.uuid)]
        if not match:
            raise ConfigError(f"--gpus {gpus}: no GPU {token!r}; NVML sees {', '.join(s.name for s in found)}")
        # one GPU named twice (``0,0`` or its index and its UUID) is still one GPU: a second set of processes
        # on it would each assume they split its memory with --procs-per-gpu others only
        picked.extend(s for s in match if s not in picked)
    return picked


def replicate(slots: list[Slot], procs_per_gpu: int | None = None) -> list[Slot]:
    """Each GPU slot ``procs_per_gpu`` times (default :data:`DEFAULT_PROCS_PER_GPU`), CPU slots once.

    The copies of ``gpuN`` are named ``gpuN.0``, ``gpuN.1``, ... (plain ``gpuN`` when there is one) and
    keep the UUID and bus id, so every process is pinned to and checks the same device;
    ``share`` tells each how many processes split the device's memory. Raises :class:`ConfigError`
    for ``procs_per_gpu`` < 1.
    """
    n = DEFAULT_PROCS_PER_GPU if procs_per_gpu is None else procs_per_gpu
    if n < 1:
        raise ConfigError(f"--procs-per-gpu {n}: expected at least 1")
    out = []
    for s in slots:
        if s.uuid is None or n == 1:
            out.append(s)
        else:
            out.extend(Slot(f"{s.name}.{k}", s.uuid, s.bus_id, share=n, memory_bytes=s.memory_bytes) for k in range(n))
    return out


def _memory(nvml: Any, handle: Any) -> int | None:
    """The device's total memory in bytes (``nvmlDeviceGetMemoryInfo``), None where NVML cannot tell."""
    try:
        return int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    except Exception:  # NVMLError (not supported, e.g. some vGPU and MIG set-ups), an NVML without the call
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def self_check(slot: Slot) -> str:
    """Open the pinned device and compare its UUID and bus id with ``slot``; returns the torch device,
    ``cuda`` or ``cpu`` (a slot without a UUID). Raises :class:`DeviceMismatch` unless CUDA sees exactly one
    device and it is the one ``slot`` names."""
    if slot.uuid is None:
        return "cpu"
    torch, _ = torch_modules()
    if not torch.cuda.is_available() or torch.cuda.device_count() != 1:
        raise DeviceMismatch(f"{slot.name}: expected exactly one visible CUDA device ({slot.uuid})")
    props = torch.cuda.get_device_properties(0)
    uuid = f"GPU-{props.uuid}"
    bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    if uuid.lower() != slot.uuid.lower() or (slot.bus_id and bus.lower() != slot.bus_id.lower()):
        raise DeviceMismatch(f"{slot.name}: assigned {slot.uuid} at {slot.bus_id}, CUDA opened {uuid} at {bus}")
    log.info("%s: opened %s at %s as assigned", slot.name, uuid, bus)
    return "cuda"
