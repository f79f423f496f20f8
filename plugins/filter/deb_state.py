# Copyright: gpuprov contributors
# Apache-2.0
"""Filters that decide, on the controller, whether apt or dpkg would act, from one read of the host's package state
(what ``gpuprov.gpu.host_state`` or ``gpuprov.gpu.deb_apt_state`` return: ``versions``, ``auto_installed``,
``selections``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def _state(state: Any, key: str, caller: str) -> Any:
    if not isinstance(state, Mapping) or key not in state:
        raise AnsibleFilterError(
            f"{caller}: the state must be a host_state or deb_apt_state result with '{key}', not {type(state).__name__}"
        )
    return state[key]


def apt_pending(packages: Any, state: Any, versions: Any = None) -> list[str]:
    """``names | gpuprov.gpu.apt_pending(state, versions)`` -> the names that ``ansible.builtin.apt`` with
    ``name=NAME=VERSION state=present`` would change, in ``names`` order: not installed, installed at another
    version, or marked automatically installed (apt marks each package it is asked for as manually installed).

    ``versions``: one version for every name (a string), name -> version (a dict; a name it lacks is pending),
    or None (the default) for ``name=NAME state=present``, which leaves any installed version as it is.

    Raises:
        AnsibleFilterError: ``state`` lacks ``versions`` or ``auto_installed``, or ``versions`` is neither a
            string nor a dict.
    """
    installed = _state(state, "versions", "apt_pending")
    auto = set(_state(state, "auto_installed", "apt_pending"))
    if versions is None:
        return [str(n) for n in packages if n in auto or n not in installed]
    if isinstance(versions, str):
        wanted = {str(name): versions for name in packages}
    elif isinstance(versions, Mapping):
        wanted = {str(k): str(v) for k, v in versions.items()}
    else:
        raise AnsibleFilterError(
            f"apt_pending: versions must be a version string, name -> version or none, not {type(versions).__name__}"
        )
    return [str(n) for n in packages if n in auto or n not in wanted or installed.get(n) != wanted[n]]


def not_held(packages: Any, state: Any) -> list[str]:
    """``names | gpuprov.gpu.not_held(state)`` -> the names whose dpkg selection is not ``hold``, in ``names``
    order (a package dpkg does not know is not held).

    Raises:
        AnsibleFilterError: ``state`` lacks ``selections``.
    """
    selections = _state(state, "selections", "not_held")
    return [str(n) for n in packages if selections.get(n) != "hold"]


class FilterModule:
    """apt_pending and not_held (gpuprov.gpu.apt_pending / gpuprov.gpu.not_held in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"apt_pending": apt_pending, "not_held": not_held}
