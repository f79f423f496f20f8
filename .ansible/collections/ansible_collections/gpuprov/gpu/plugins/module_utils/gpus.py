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


#: NVML's names (nvmlDeviceGetName, normalised) of the matrix models whose NVML name is not the model's name with a
#: form-factor or memory suffix: the H100 SXM5 reports "NVIDIA H100 80GB HBM3", the 80 GB A100 PCIe card
#: "NVIDIA A100 80GB PCIe".
NVML_ALIASES = {"h100sxm580gb": ("h10080gbhbm3",), "a100pcie80gb": ("a10080gbpcie",)}

#: What NVML may add after a model's name: form factor, memory size and type, edition ("NVIDIA H200 NVL",
#: "Tesla V100-PCIE-32GB", "NVIDIA GH200 480GB", "NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX PRO 6000 Blackwell
#: Server Edition"). Another digit or model letter is another model: an A10 is no A100, an L40 no L40S.
_NVML_SUFFIX = re.compile(r"^(nvl|sxm\d*|pcie|\d+gb|hbm\d*e?|generation|edition|workstation|maxq|ac)+$")


def model_matches(expected, nvml_name):
    """Whether NVML's name of a GPU is fleet model ``expected``: 'H200' matches 'NVIDIA H200' and 'NVIDIA H200 NVL',
    'H100-SXM5-80GB' matches 'NVIDIA H100 80GB HBM3'; 'A10' does not match 'NVIDIA A100-SXM4-80GB', nor 'L40' an
    'NVIDIA L40S'."""
    want, have = norm_model(expected), norm_model(nvml_name)
    if not want:
        return False
    if have == want or have in NVML_ALIASES.get(want, ()):
        return True
    return have.startswith(want) and bool(_NVML_SUFFIX.match(have[len(want):]))


def usable_gpus(nvml):
    """The GPU entries of an NVML fact that are not lost."""
    return [g for g in (nvml or {}).get("gpus") or [] if not g.get("lost")]
