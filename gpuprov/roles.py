"""The role catalogue: which roles exist, in which order ``site.yml`` applies them, what each touches.

The order is read from ``playbooks/site.yml`` (its ``import_playbook`` entries) and each role's
one-line summary and description from ``roles/<role>/meta/argument_specs.yml``, the single source
of a role's interface, so nothing here can drift from the playbooks.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprov.exceptions import ConfigError
from gpuprov.resources import load_yaml, playbooks_dir, roles_dir


@dataclass(frozen=True)
class RoleInfo:
    """One role as ``gpuprov roles`` lists it.

    Attributes:
        name: role name, also its playbook's stem (``playbooks/<name>.yml``) and its play tag.
        summary: ``short_description`` from the role's argument specs.
        touches: ``description`` lines from the argument specs: what the role changes on a host.
        playbook: path of the role's own playbook.
    """

    name: str
    summary: str
    touches: tuple[str, ...]
    playbook: Path


def _site_order(site: Path) -> list[str]:
    plays: Any = load_yaml(site.read_text(encoding="utf-8")) or []
    order: list[str] = []
    for play in plays:
        target = play.get("ansible.builtin.import_playbook") or play.get("import_playbook")
        if isinstance(target, str):
            order.append(Path(target).stem)
    return order


def _specs(role: str) -> tuple[str, tuple[str, ...]]:
    path = roles_dir() / role / "meta" / "argument_specs.yml"
    if not path.is_file():
        return "", ()
    data: Any = load_yaml(path.read_text(encoding="utf-8")) or {}
    main = (data.get("argument_specs") or {}).get("main") or {}
    description = main.get("description") or []
    if isinstance(description, str):
        description = [description]
    return _plain(str(main.get("short_description", ""))), tuple(_plain(str(d)) for d in description)


def _plain(text: str) -> str:
    """Drop Ansible's documentation markup: ``C(x)``, ``I(x)``, ``B(x)``, ``V(x)``, ``O(x)`` -> ``x``."""
    return re.sub(r"\b[CIBVO]\(([^()]*)\)", r"\1", text)


def list_roles() -> list[RoleInfo]:
    """Return the roles in the order ``playbooks/site.yml`` applies them."""
    pdir = playbooks_dir()
    roles = []
    for name in _site_order(pdir / "site.yml"):
        summary, touches = _specs(name)
        roles.append(RoleInfo(name=name, summary=summary, touches=touches, playbook=pdir / f"{name}.yml"))
    return roles


def role_playbook(name: str) -> Path:
    """Return ``playbooks/<name>.yml`` for a role that ``site.yml`` applies.

    Raises:
        ConfigError: ``name`` is not a gpuprov role (the message lists the roles and a close match).
    """
    known = _site_order(playbooks_dir() / "site.yml")
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" - did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"--role {name}: no such role{hint} (roles: {', '.join(known)})")
    return playbooks_dir() / f"{name}.yml"
