# Copyright: gpuprov contributors
# Apache-2.0
"""Filter deciding which container engines get CDI switched on (``plugins/module_utils/cdi.py`` holds the rule)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.module_utils.cdi import CDI_MIN_VERSIONS, engine_cdi_state

#: The program whose ``--version`` each engine is judged by.
PROGRAMS = {"dockerd": "docker", "containerd": "containerd"}


def cdi_engine_states(results: Any) -> dict[str, str]:
    """``register``'d loop results of ``<dockerd|containerd> --version`` -> ``{"docker": "enabled" | reason,
    "containerd": ...}``.

    Raises:
        AnsibleFilterError: an item is not a command result for dockerd or containerd.
    """
    states: dict[str, str] = {}
    for result in results or []:
        program = result.get("item") if isinstance(result, dict) else None
        if program not in PROGRAMS:
            raise AnsibleFilterError(
                f"cdi_engine_states: expected results of dockerd/containerd --version, got {program!r}")
        engine = PROGRAMS[program]
        output = "{}\n{}".format(result.get("stdout", ""), result.get("stderr", "") or result.get("msg", ""))
        states[engine] = engine_cdi_state(engine, output, int(result.get("rc", 1)))
    return states


class FilterModule:
    """cdi_engine_states (gpuprov.gpu.cdi_engine_states in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"cdi_engine_states": cdi_engine_states}


__all__ = ["CDI_MIN_VERSIONS", "FilterModule", "cdi_engine_states"]
