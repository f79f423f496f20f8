"""Where gpuprov finds its Ansible collection and templates, and keeps its state.

The roles, playbooks, modules and plugins are the ``gpuprov.gpu`` collection. The wheel ships it as
``ansible_collections/gpuprov/gpu/`` next to the ``gpuprov`` package (``.ci/hatch_build.py``); in a source
checkout or an editable install the checkout is the collection root and ``.collections/`` holds the link
``ansible_collections/gpuprov/gpu`` to it. Either way :func:`collections_path` is the directory Ansible
is given as its collections path and Python finds ``ansible_collections.gpuprov.gpu`` on ``sys.path``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gpuprov.exceptions import ConfigError

_PACKAGE_DIR = Path(__file__).resolve().parent

#: The collection's name, as roles and modules are called by it (``gpuprov.gpu.nouveau``).
COLLECTION = "gpuprov.gpu"

#: PyYAML's safe loader in C (libyaml, in PyYAML's wheels) where built, else the pure-Python one: the same
#: documents, ten times faster on the collection's files that every command reads (argument specs, role vars).
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """``text`` parsed as ``yaml.safe_load`` would (safe constructors only). Raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_SAFE_LOADER)


def collections_path() -> Path:
    """Return the directory holding ``ansible_collections/gpuprov/gpu``: site-packages for a wheel install,
    the checkout's ``.collections`` otherwise.

    Raises:
        FileNotFoundError: neither location holds the collection (a broken installation).
    """
    for candidate in (_PACKAGE_DIR.parent, _PACKAGE_DIR.parent / ".collections"):
        if (candidate / "ansible_collections" / "gpuprov" / "gpu" / "galaxy.yml").is_file():
            return candidate
    raise FileNotFoundError(f"no ansible_collections/gpuprov/gpu/galaxy.yml under {_PACKAGE_DIR.parent} "
                            f"or {_PACKAGE_DIR.parent / '.collections'}: reinstall gpuprov")


def collection_dir() -> Path:
    """Return the collection root (``galaxy.yml``, ``roles/``, ``playbooks/``, ``plugins/``), links resolved."""
    return (collections_path() / "ansible_collections" / "gpuprov" / "gpu").resolve()


def playbooks_dir() -> Path:
    """Return the directory holding ``site.yml`` and one ``<role>.yml`` per role."""
    return collection_dir() / "playbooks"


def roles_dir() -> Path:
    """Return the directory holding the collection's roles."""
    return collection_dir() / "roles"


@functools.cache
def role_defaults(role: str, kind: str = "defaults") -> dict[str, Any]:
    """Return the variables of ``roles/<role>/<kind>/main.yml`` (``kind``: ``defaults`` or ``vars``), as
    written (Jinja left unrendered).

    Controller code that needs a role's value (the DCGM version it installs, the toolkit packages it pins,
    NVIDIA's repository base) reads it here, so the role's file stays the one copy.

    Raises:
        FileNotFoundError: the collection has no such role.
    """
    path = roles_dir() / role / kind / "main.yml"
    return load_yaml(path.read_text(encoding="utf-8")) or {}


def templates_dir() -> Path:
    """Return the directory holding gpuprov's own Jinja templates (``ansible.cfg.j2``): the wheel's
    ``gpuprov/_templates``, else the checkout's ``templates/``."""
    shipped = _PACKAGE_DIR / "_templates"
    return shipped if shipped.is_dir() else _PACKAGE_DIR.parent / "templates"


def cache_dir() -> Path:
    """Return gpuprov's cache directory: ``$XDG_CACHE_HOME/gpuprov``, else ``~/.cache/gpuprov``. What is
    kept there can be downloaded or built again. It is not created here."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "gpuprov"


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Return gpuprov's state directory, absolute: ``$GPUPROV_STATE_DIR``, else ``$XDG_STATE_HOME/gpuprov``,
    else ``~/.local/state/gpuprov`` (``environ``: the environment to read, default ``os.environ``). A relative
    ``GPUPROV_STATE_DIR`` is taken from the current directory here, once: ansible-runner runs in the run
    directory, where a relative inventory path would name nothing. A relative ``XDG_STATE_HOME`` is ignored, as
    the XDG Base Directory specification says. It is not created here.

    Raises:
        ConfigError: ``GPUPROV_STATE_DIR`` starts with ``~user`` for a user this machine does not have.
    """
    env = os.environ if environ is None else environ
    explicit = env.get("GPUPROV_STATE_DIR")
    if explicit:
        try:
            return Path(explicit).expanduser().absolute()
        except RuntimeError as exc:  # ~nosuchuser
            raise ConfigError(f"GPUPROV_STATE_DIR {explicit}: {exc} - set it to a folder gpuprov may write") from None
    xdg = env.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return (base / "gpuprov").absolute()
