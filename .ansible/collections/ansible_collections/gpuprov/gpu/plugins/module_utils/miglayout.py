# Copyright: gpuprov contributors
# Apache-2.0
"""MIG layout rules that the verify ladder (``verify_ladder``'s ``mig`` step) and ``gpuprov check``'s drift
report (gpuprov/drift.py) both apply: the layout a fleet asks of a host, read against what the host has. Pure
Python 3.8.

Inputs: the fleet's ``mig.layout`` name and ``mig.layouts`` table (as the ``gpuprov_mig_layout`` and
``gpuprov_mig_layouts`` variables hold them: ``{name: [{devices: "all" | [index, ...], mig_enabled: bool,
mig_devices: {profile: count}}]}``), each GPU's MIG mode (NVML ``nvmlDeviceGetMigMode`` current) and the GPU
instances ``nvidia-smi mig -lgi`` lists. The mig role's engine (plugins/module_utils/mig.py) resolves a layout
the same way (a later entry wins for a GPU) and creates instances in :func:`creation_order`, as the boot unit
gpuprov-mig.service does with ``nvidia-smi mig -cgi``.
"""


from __future__ import annotations

import re
from typing import Any

#: One GPU instance row of ``nvidia-smi mig -lgi``: ``|   0  MIG 1g.10gb     19     7    0:1     |``
_MIG_LINE = re.compile(r"^\|\s+(\d+)\s+MIG\s+(\S+)\s+\d+\s+\d+\s+\d+:\d+\s+\|")


#: the compute slices a MIG profile name starts with: ``3g.40gb`` -> 3
_SLICES = re.compile(r"^(\d+)g\.")


def creation_order(devices):
    """The profiles of ``devices`` (``{profile: count}``) one per GPU instance, in the order they are created:
    largest first (compute slices, from the name), then by name, as NVIDIA's mig-parted does; small instances
    placed first can block the placements of larger ones. ``{"1g.10gb": 2, "3g.40gb": 1}`` ->
    ``["3g.40gb", "1g.10gb", "1g.10gb"]``."""
    def key(name):
        match = _SLICES.match(name)
        return (-int(match.group(1)) if match else 0, name)

    return [name for name in sorted(devices, key=key) for _ in range(int(devices[name]))]


def unset(value: Any) -> bool:
    """True for a layout name that means "not managed": null, empty, or the string Ansible renders for None."""
    return value in (None, "", "None", "none", "null")


def parse_mig_instances(text: str | None) -> dict[int, dict[str, int]]:
    """``nvidia-smi mig -lgi`` output -> ``{gpu index: {profile name: instances}}``."""
    out: dict[int, dict[str, int]] = {}
    for line in (text or "").splitlines():
        match = _MIG_LINE.match(line.strip())
        if match:
            counts = out.setdefault(int(match.group(1)), {})
            counts[match.group(2)] = counts.get(match.group(2), 0) + 1
    return out


def desired_layout(layout: Any, layouts: dict[str, Any] | None,
                   indexes: list[Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The per-GPU state ``layout`` asks for on GPUs ``indexes``: ``({"<index>": {mig_enabled, mig_devices}},
    None)``, or ``(None, problem)`` when the name is not in ``layouts``."""
    entries = (layouts or {}).get(layout)
    if not isinstance(entries, list):
        return None, "layout %s is not in mig.layouts" % layout
    desired = {}
    for item in entries:
        devices = item.get("devices", "all")
        for index in (list(indexes) if devices == "all" else list(devices)):
            desired[str(index)] = {"mig_enabled": bool(item.get("mig_enabled", True)),
                                   "mig_devices": dict(item.get("mig_devices") or {})}
    return desired, None


def layout_problems(desired: dict[str, Any], modes: dict[Any, Any],
                    instances: dict[int, dict[str, int]]) -> list[str]:
    """Sentences for each GPU whose MIG mode or instances differ from ``desired`` (:func:`desired_layout`);
    ``modes``: ``{index: current MIG mode}``; ``instances``: :func:`parse_mig_instances`' result."""
    problems = []
    for index, spec in sorted(desired.items(), key=lambda kv: int(kv[0])):
        have_mode = modes.get(int(index))
        have = instances.get(int(index), {})
        if bool(have_mode) != spec["mig_enabled"]:
            problems.append("GPU %s: MIG %s, wanted %s" % (index, "on" if have_mode else "off",
                                                             "on" if spec["mig_enabled"] else "off"))
        elif spec["mig_enabled"] and have != spec["mig_devices"]:
            problems.append("GPU %s: instances %s, wanted %s" % (index, _counts(have), _counts(spec["mig_devices"])))
    return problems


def _counts(devices):
    return ", ".join("%d x %s" % (n, name) for name, n in sorted(devices.items())) or "none"
