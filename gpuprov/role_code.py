"""Load the Python that ships inside ``roles/gpuprov_common`` (module_utils and modules) into gpuprov itself.

The rules and collectors that run on hosts as Ansible modules also serve the local commands
(``gpuprov facts``, ``gpuprov doctor``): one copy of each piece of logic. Files under ``module_utils/`` are
registered as ``ansible.module_utils.<name>``, the name Ansible's modules import them by, so a module
file that imports a module_utils file loads here unchanged.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from gpuprov.exceptions import EnvironmentMissing
from gpuprov.resources import roles_dir


def common_path(relative: str) -> Path:
    """Path of ``relative`` (``module_utils/x.py``, ``library/y.py``) under ``roles/gpuprov_common``."""
    return roles_dir() / "gpuprov_common" / relative


def _exec(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise EnvironmentMissing(f"{path} is missing: reinstall gpuprov")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def module_utils(name: str) -> ModuleType:
    """Import ``module_utils/<name>.py`` as ``ansible.module_utils.<name>`` (once per process).

    Raises:
        EnvironmentMissing: the file is missing (a broken installation).
    """
    return _exec(f"ansible.module_utils.{name}", common_path(f"module_utils/{name}.py"))


def library(name: str, *, needs: tuple[str, ...] = ()) -> ModuleType:
    """Import the Ansible module ``library/<name>.py`` after the module_utils files it imports (``needs``).

    Raises:
        EnvironmentMissing: a file is missing (a broken installation).
    """
    for dependency in needs:
        module_utils(dependency)
    return _exec(f"gpuprov_library_{name}", common_path(f"library/{name}.py"))
