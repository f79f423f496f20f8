"""Where gpuprov finds its Ansible content and keeps its state.

Roles, playbooks and templates ship inside the wheel under ``gpuprov/_ansible/`` (see
``[tool.hatch.build.targets.wheel.force-include]`` in pyproject.toml); in a source checkout or an
editable install they are the repository's top-level ``roles/``, ``playbooks/`` and ``templates/``.
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def ansible_dir() -> Path:
    """Return the directory that holds ``roles/`` and ``playbooks/``.

    The wheel's ``gpuprov/_ansible`` wins when it exists; otherwise the source checkout's root.

    Raises:
        FileNotFoundError: neither location has a ``playbooks/site.yml``.
    """
    for candidate in (_PACKAGE_DIR / "_ansible", _PACKAGE_DIR.parent):
        if (candidate / "playbooks" / "site.yml").is_file():
            return candidate
    raise FileNotFoundError(f"no playbooks/site.yml under {_PACKAGE_DIR / '_ansible'} or {_PACKAGE_DIR.parent}")


def playbooks_dir() -> Path:
    """Return the directory holding ``site.yml`` and one ``<role>.yml`` per role."""
    return ansible_dir() / "playbooks"


def roles_dir() -> Path:
    """Return the directory holding the gpuprov roles."""
    return ansible_dir() / "roles"


def templates_dir() -> Path:
    """Return the directory holding gpuprov's own Jinja templates (``ansible.cfg.j2``)."""
    return ansible_dir() / "templates"


def state_dir() -> Path:
    """Return gpuprov's state directory: ``$GPUPROV_STATE_DIR``, else ``$XDG_STATE_HOME/gpuprov``,
    else ``~/.local/state/gpuprov``. It is not created here."""
    explicit = os.environ.get("GPUPROV_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "gpuprov"
