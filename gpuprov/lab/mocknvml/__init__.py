"""A simulated NVML: a C ``libnvidia-ml.so.1`` that answers from YAML profiles.

pynvml, the real ``nvidia-smi`` and gpuprov's own NVML code load it exactly as they load NVIDIA's
library, so the code under test is the code that runs on real GPU hosts. See ``docs/mock-nvml.md``.

Public API:

* :func:`build_library` - compile the library into a directory.
* :func:`compile_profile` / :func:`load_profile` / :func:`list_profiles` - profiles.
* :func:`install` - put the library and a profile into a root file system (lab containers).
* :func:`driver_overlay` - the overlay that makes the library report another driver version.
* :func:`mock_environment` - the environment variables that make a process use the mock.
* :func:`bind_pynvml` - point this process's pynvml at a built library (in-process tests).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from gpuprov.lab.mocknvml.build import LIBRARY_NAME, build_library
from gpuprov.lab.mocknvml.profile import (
    NVML_ERRORS,
    PROFILES_DIR,
    compile_profile,
    list_profiles,
    load_profile,
    profile_path,
)

__all__ = [
    "CONF_PATH",
    "LIBRARY_DIR",
    "LIBRARY_NAME",
    "NVML_ERRORS",
    "PROFILES_DIR",
    "PROFILE_DIR",
    "Installed",
    "bind_pynvml",
    "build_library",
    "compile_profile",
    "driver_overlay",
    "install",
    "list_profiles",
    "load_profile",
    "mock_environment",
    "profile_path",
]

#: Where :func:`install` puts things, relative to the root it is given.
LIBRARY_DIR = Path("usr/lib/x86_64-linux-gnu")
CONF_PATH = Path("etc/gpuprov/mock-nvml.conf")
PROFILE_DIR = Path("etc/gpuprov/mock-nvml.d")


@dataclass(frozen=True)
class Installed:
    """What :func:`install` wrote: the library, its dev symlink, the active conf, the profile dir."""

    library: Path
    symlink: Path
    conf: Path
    profile_dir: Path


def driver_overlay(driver_version: str) -> str:
    """Overlay text (the profile's ``key=value`` form) making the mock report driver ``driver_version``: its
    NVML version (``<CUDA major>.<driver>``) and CUDA driver version (``1000*major + 10*minor``) are those of the
    newest CUDA release whose toolkit driver is at most that version, from gpuprov's matrix (``580.65.06`` ->
    CUDA 13.0: ``13.580.65.06``, 13000).

    Raises:
        ConfigError: no CUDA release in the matrix runs on that driver.
    """
    from gpuprov.exceptions import ConfigError
    from gpuprov.matrix import load_matrix, version_key

    releases = load_matrix().cuda
    runs = [cuda for cuda, release in releases.items() if version_key(release.driver) <= version_key(driver_version)]
    if not runs:
        raise ConfigError(f"driver {driver_version}: no CUDA release in the matrix runs on it")
    cuda = max(runs, key=version_key)
    major, minor = (int(part) for part in cuda.split(".")[:2])
    return (f"# the installed driver's versions (gpuprov stand-in)\nsystem.driver_version={driver_version}\n"
            f"system.nvml_version={major}.{driver_version}\nsystem.cuda_driver_version={1000 * major + 10 * minor}\n")


def install(root: Path, profile: str | Path, overlay: str | None = None) -> Installed:
    """Install the mock NVML into the file system under ``root``.

    Writes ``<root>/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1`` (+ ``libnvidia-ml.so`` symlink),
    the compiled ``profile`` as ``<root>/etc/gpuprov/mock-nvml.conf`` (what the library reads by
    default) and every shipped profile as ``<root>/etc/gpuprov/mock-nvml.d/<name>.conf``, so that
    ``GPUPROV_MOCK_NVML_PROFILE=<name>`` switches profile inside the container. With ``overlay`` (a path
    on the target) the active profile names it: when that file exists its keys (:func:`driver_overlay`) win.
    """
    lib_dir = root / LIBRARY_DIR
    library = build_library(lib_dir)
    symlink = lib_dir / "libnvidia-ml.so"
    if symlink.is_symlink() or symlink.exists():
        symlink.unlink()
    symlink.symlink_to(LIBRARY_NAME)
    profile_dir = root / PROFILE_DIR
    profile_dir.mkdir(parents=True, exist_ok=True)
    for name in list_profiles():
        (profile_dir / f"{name}.conf").write_text(compile_profile(name), encoding="utf-8")
    conf = root / CONF_PATH
    conf.write_text(compile_profile(profile) + (f"overlay={overlay}\n" if overlay else ""), encoding="utf-8")
    return Installed(library=library, symlink=symlink, conf=conf, profile_dir=profile_dir)


def mock_environment(library_dir: Path, profile: str | Path, conf_dir: Path) -> dict[str, str]:
    """Return a copy of ``os.environ`` set up to load the mock from ``library_dir`` with ``profile``.

    The profile is compiled to ``conf_dir/<name>.conf``; ``LD_LIBRARY_PATH`` gets ``library_dir``
    first and ``GPUPROV_MOCK_NVML_CONF`` names the compiled file.
    """
    conf_dir.mkdir(parents=True, exist_ok=True)
    conf = conf_dir / f"{profile_path(profile).stem}.conf"
    conf.write_text(compile_profile(profile), encoding="utf-8")
    env = dict(os.environ)
    paths = [str(library_dir), *filter(None, env.get("LD_LIBRARY_PATH", "").split(":"))]
    env["LD_LIBRARY_PATH"] = ":".join(paths)
    env["GPUPROV_MOCK_NVML_CONF"] = str(conf)
    env.pop("GPUPROV_MOCK_NVML_PROFILE", None)
    return env


def bind_pynvml(library: Path) -> ModuleType:
    """Make this process's pynvml call ``library`` (a built mock) and return the pynvml module.

    pynvml loads ``libnvidia-ml.so.1`` once into ``pynvml.nvmlLib`` and caches every function pointer it
    resolves in ``pynvml._nvmlGetFunctionPointer_cache`` (nvidia-ml-py 12.x and 13.x). Binding a second copy
    of the library without clearing that cache leaves ``nvmlInit`` calling the first copy while new calls reach
    the second, which then answers ``NVML_ERROR_UNINITIALIZED``; both are therefore replaced together.
    NVML must be shut down (reference count 0) when this is called.

    Raises ``OSError`` when the library cannot be loaded.
    """
    import pynvml  # only in-process tests need pynvml bound to a mock

    pynvml.nvmlLib = ctypes.CDLL(str(library))
    pynvml._nvmlGetFunctionPointer_cache.clear()  # see the docstring
    module: ModuleType = pynvml
    return module
