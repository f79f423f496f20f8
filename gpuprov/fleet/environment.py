"""The fleet file's ``{env: NAME}`` references: secrets (a become password, a proxy or mirror URL with credentials)
read from the controller's environment at run time, never written into the fleet file or the run record."""

from __future__ import annotations

import os
from collections.abc import Iterator

from gpuprov.exceptions import ConfigError
from gpuprov.fleet.model import Fleet


def env_refs(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """Yield ``(field path, variable name)`` for every ``{env: NAME}`` reference inside ``value``."""
    if isinstance(value, dict):
        if set(value) == {"env"} and isinstance(value["env"], str):
            yield path, value["env"]
            return
        for key, item in value.items():
            yield from env_refs(item, f"{path}.{key}" if path else str(key))


def check_env_refs(fleet: Fleet) -> None:
    """Every secret the fleet file names as ``{env: NAME}`` must be set before anything runs, whatever ``--limit``
    selects (a secret missing for another host fails the next whole run anyway).

    Raises:
        ConfigError: the first variable unset or empty, naming the field and the variable.
    """
    hosts = fleet.hosts.values()
    refs = [(f"hosts.{h.name}.settings.{p}", n) for h in hosts for p, n in env_refs(h.settings)]
    refs += [(f"hosts.{h.name}.become_password", h.connection.become_password_env)
             for h in hosts if h.connection.become_password_env]
    for field_path, name in refs:
        value = os.environ.get(name)
        if not value:  # an empty password or URL is no secret either: the run would fail on the host
            state = "is not set" if value is None else "is set but empty"
            raise ConfigError(f"{field_path}: environment variable {name} {state} - export {name} "
                              "(the fleet file names it as {env: " + name + "})")
