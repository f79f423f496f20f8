"""The validated fleet: hosts with connection data, groups, effective settings and the raw layers.

Settings are plain JSON-like mappings shaped like :class:`gpuprov.fleet.schema.Settings` (section ->
key -> value); credentials appear only as ``{"env": NAME}`` references.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprov.fleet.problem import Problem


@dataclass(frozen=True)
class Connection:
    """How Ansible reaches a host (after applying the fleet's ``ssh`` defaults).

    ``become_password_env`` names the environment variable holding the become password, or None.
    """

    address: str
    port: int
    user: str | None
    key: str | None
    become: bool
    become_password_env: str | None
    known_hosts: str | None
    host_key_checking: bool


@dataclass(frozen=True)
class Resolution:
    """A value gpuprov chose for a host: ``field`` (dotted settings path), ``value`` and ``reason``."""

    field: str
    value: Any
    reason: str


@dataclass
class Host:
    """One fleet host.

    ``groups`` is in precedence order (later wins); ``layer`` holds the host's own settings as written
    (normalised); ``settings`` the effective settings (merged, defaults applied, ``auto`` resolved);
    ``resolutions`` what was resolved and why; ``notes`` advisories that are not errors; ``warnings`` problems
    that leave the file valid (an end-of-life driver branch), each at its file line; ``canary`` marks a host
    ``gpuprov upgrade`` moves first.
    """

    name: str
    line: int
    connection: Connection
    groups: tuple[str, ...]
    layer: dict[str, Any]
    settings: dict[str, Any]
    resolutions: tuple[Resolution, ...] = ()
    notes: tuple[str, ...] = ()
    description: str | None = None
    warnings: tuple[Problem, ...] = ()
    canary: bool = False


@dataclass
class Fleet:
    """A validated fleet file.

    ``source`` is the path it was read from; ``defaults`` the schema defaults of every setting;
    ``settings`` the fleet-wide layer; ``groups`` each group's layer in file order (that order is the
    group priority in the rendered inventory); ``hosts`` by inventory name, in file order.
    """

    source: Path
    version: int
    name: str | None
    defaults: dict[str, Any]
    settings: dict[str, Any]
    groups: dict[str, dict[str, Any]]
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def warnings(self) -> list[Problem]:
        """Every host's warnings, by file line, each once (hosts sharing a group setting share its line)."""
        return sorted({w for host in self.hosts.values() for w in host.warnings})

    def members(self, group: str) -> list[str]:
        """Names of the hosts in ``group``, in file order."""
        return [name for name, host in self.hosts.items() if group in host.groups]
