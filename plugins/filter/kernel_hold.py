# Copyright: gpuprov contributors
# Apache-2.0
"""The dpkg selections that hold or release the kernel meta packages (``kernel.hold``), decided on the controller
from one read of the host's package state and gpuprov's record of the holds it made."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import kernel_metas


def _recorded(record: Any) -> list[str]:
    """The package names of the record's text (``{"held": [...]}``); '' or None: no record."""
    if record is None or (isinstance(record, str) and not record.strip()):
        return []
    try:
        held = json.loads(record)["held"] if isinstance(record, str) else record["held"]
    except (ValueError, TypeError, KeyError) as exc:
        raise AnsibleFilterError(
            f"kernel_hold_plan: the record of gpuprov's kernel holds is not {{\"held\": [names]}} ({exc}); "
            "delete the file (dpkg --get-selections 'linux-*' shows the holds) and re-run"
        ) from exc
    if not isinstance(held, list) or not all(isinstance(n, str) for n in held):
        raise AnsibleFilterError("kernel_hold_plan: the record's held must be a list of package names; delete the "
                                 "file and re-run")
    return sorted(set(held))


def kernel_hold_plan(state: Any, hold: Any, record: Any = None, lift: Any = False) -> dict[str, list[str]]:
    """``state | gpuprov.gpu.kernel_hold_plan(hold, record, lift)`` -> ``{metas, hold, release, record}``.

    ``state``: a deb_packages (or deb_apt_state) result with ``versions`` and ``selections``. ``record``: the text of
    gpuprov's record (``{"held": [names]}``; '' when absent). ``metas``: the installed kernel meta packages. With
    ``hold`` true: ``hold`` lists the metas not held yet; ``record`` becomes the recorded names still held plus those,
    never a meta an admin held before. With ``hold`` false: ``release`` lists the recorded names still installed
    and held (an admin's holds are not in the record) and ``record`` is empty. ``lift`` (true while the hwe_kernel
    role installs a kernel): ``release`` as with ``hold`` false, but the record stays for the hold applied after
    the install.

    Raises:
        AnsibleFilterError: ``state`` lacks ``versions`` or ``selections``, or the record is not
            ``{"held": [names]}``.
    """
    if not isinstance(state, Mapping) or "versions" not in state or "selections" not in state:
        raise AnsibleFilterError("kernel_hold_plan: the state must be a deb_packages or deb_apt_state result with "
                                 "'versions' and 'selections'")
    selections = state["selections"]
    metas = kernel_metas(state["versions"])
    recorded = _recorded(record)
    # a recorded package no longer installed is left alone: selection install would mark it for installation
    held_by_us = [n for n in recorded if selections.get(n) == "hold" and n in state["versions"]]
    if boolean(lift, strict=False):
        return {"metas": metas, "hold": [], "release": held_by_us, "record": recorded}
    if boolean(hold, strict=False):
        new = [n for n in metas if selections.get(n) != "hold"]
        return {"metas": metas, "hold": new, "release": [], "record": sorted(set(held_by_us) | set(new))}
    return {"metas": metas, "hold": [], "release": held_by_us, "record": []}


class FilterModule:
    """kernel_hold_plan (gpuprov.gpu.kernel_hold_plan in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"kernel_hold_plan": kernel_hold_plan}
