# Copyright: gpuprov contributors
# Apache-2.0
"""NVML values in the units and spellings of the ``gpuprov_gpus`` fact: bytes to text, NVML's bus ids, CUDA
versions, architecture and NVLink version enums, CPU affinity masks, milliwatts. Pure functions of the NVML
collector (module_utils/nvml.py).

Must stay importable on Python 3.8 (Ubuntu 20.04 targets): no ``match``, no runtime ``X | Y`` types.
"""

from __future__ import annotations

from typing import Any


def text(value: Any) -> str:
    """Decode a bytes value that older pynvml releases return; pass str through."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def sysfs_bus_id(bus_id: str | None) -> str | None:
    """``00000000:00:06.0`` (NVML, 8-digit domain) -> ``0000:00:06.0`` (sysfs/lspci, lower case)."""
    if not bus_id:
        return None
    domain, _, rest = bus_id.partition(":")
    if not rest:
        return bus_id.lower()
    return f"{int(domain, 16):04x}:{rest}".lower()


def cuda_version_text(value: int | None) -> str | None:
    """``13000`` -> ``"13.0"``; ``12040`` -> ``"12.4"`` (NVML's 1000*major + 10*minor encoding)."""
    if value is None:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def architecture_name(nv: Any, value: int | None) -> str | None:
    """``9`` -> ``"hopper"`` from pynvml's ``NVML_DEVICE_ARCH_*`` constants; unknown codes as text."""
    if value is None:
        return None
    for attr in dir(nv):
        if attr.startswith("NVML_DEVICE_ARCH_") and getattr(nv, attr) == value:
            return attr[len("NVML_DEVICE_ARCH_") :].lower()
    return str(value)


def nvlink_version_text(nv: Any, value: int | None) -> str | None:
    """NVML's NVLink version enum -> text: ``6`` (``NVML_NVLINK_VERSION_4_0``) -> ``"4.0"``; 0 (invalid) -> None."""
    if not value:
        return None
    for attr in dir(nv):
        if (
            attr.startswith("NVML_NVLINK_VERSION_")
            and attr != "NVML_NVLINK_VERSION_INVALID"
            and getattr(nv, attr) == value
        ):
            return attr[len("NVML_NVLINK_VERSION_") :].replace("_", ".")
    return str(value)


def cpu_ids(mask_words: Any) -> list[int]:
    """Expand NVML's CPU affinity bitmask (a sequence of 64-bit words, word 0 = CPUs 0-63) to CPU ids."""
    out = []
    for word_index, raw in enumerate(mask_words):
        word = int(raw)
        for bit in range(64):
            if word >> bit & 1:
                out.append(word_index * 64 + bit)
    return out


def milliwatts_to_watts(value: int | None) -> float | None:
    """NVML reports power in mW; facts carry W (``700000`` -> ``700.0``)."""
    return None if value is None else round(value / 1000.0, 3)
