# Copyright: gpuprov contributors
# Apache-2.0
"""GPU names shared by the rules and the modules: PCI bus ids and model names in one normal form, and the GPUs
of a ``gpuprov_gpus`` fact that NVML can still open. Pure Python 3.8, no Ansible, no I/O."""


from __future__ import annotations

import re


def norm_bus(bus_id):
    """'00000000:3B:00.0' / '0000:3b:00' -> '0000:3b:00.0'; None stays None."""
    if not bus_id:
        return None
    text = str(bus_id).strip().lower()
    if re.match(r"^[0-9a-f]{8}:", text):
        text = text[4:]
    if re.match(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", text):
        text = "0000:" + text
    if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}$", text):
        text += ".0"
    return text


def norm_model(name):
    """'NVIDIA GeForce RTX 3090' / 'RTX-3090' -> 'rtx3090'."""
    text = str(name or "").lower()
    for word in ("nvidia", "geforce", "tesla", "quadro"):
        text = text.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", text)


def model_matches(expected, nvml_name):
    """Fleet 'H200' matches NVML 'NVIDIA H200' and 'NVIDIA H200 NVL'; 'A100-SXM4-80GB' only that board."""
    want, have = norm_model(expected), norm_model(nvml_name)
    return bool(want) and have.startswith(want)


def usable_gpus(nvml):
    """The GPU entries of an NVML fact that are not lost."""
    return [g for g in (nvml or {}).get("gpus") or [] if not g.get("lost")]
