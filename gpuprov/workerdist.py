"""The worker distribution: the part of gpuprov a GPU host runs, built as a wheel on the controller.

The image_workers role installs it into the workers' venv instead of the whole gpuprov package, so a GPU host
gets torch and the workers (``gpuprov images``) and none of the controller's libraries (ansible-core,
ansible-runner, pydantic, rich, the Docker SDK). The wheel holds the modules named by :data:`MEMBERS`, taken
from the installed gpuprov package, and declares what they import: the ``images`` extra of gpuprov and the
runtime requirements named in :data:`RUNTIME_NEEDS`, with gpuprov's own version pins.

Public API::

    build_worker_wheel(dest: Path) -> Path   # dest/gpuprov_worker-<version>-py3-none-any.whl
    worker_requirements() -> list[str]       # its Requires-Dist lines, e.g. "torch==2.14.1"

The wheel is written as the binary distribution format specifies (PEP 427; RECORD as in PEP 376, hashes
``sha256=`` in unpadded urlsafe base64) and is reproducible: same files, same bytes, so a rebuild copies
nothing new onto a host. ``python -m gpuprov.workerdist DIR`` builds it into ``DIR``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import sys
import zipfile
from pathlib import Path

import gpuprov
from gpuprov.exceptions import ConfigError, EnvironmentMissing, GpuprovError

#: the distribution's name on an index and in ``pip list``
DIST_NAME = "gpuprov-worker"

#: files and folders (relative to the gpuprov package) the worker runs: the ``gpuprov`` command with only its
#: ``images`` group (the other commands are absent, so ``gpuprov --help`` lists ``images`` alone)
MEMBERS = (
    "__init__.py",
    "__main__.py",
    "py.typed",
    "exceptions.py",
    "redact.py",
    "cli/__init__.py",
    "cli/__main__.py",
    "cli/images.py",
    "cli/images_options.py",
    "cli/images_report.py",
    "cli/images_warm.py",
    "images",
)

#: gpuprov's runtime requirements the worker modules import (the rest are the controller's)
RUNTIME_NEEDS = ("click", "redis", "nvidia-ml-py")

_NAME = re.compile(r"^[A-Za-z0-9._-]+")
#: `` and extra == 'images'`` or ``; extra == 'images'`` as a built wheel's metadata writes it
_EXTRA_MARKER = re.compile(r"""(\s+and\s+extra\s*==\s*['"]images['"]|;\s*extra\s*==\s*['"]images['"]\s*$)""")
_WHEEL = b"Wheel-Version: 1.0\nGenerator: gpuprov.workerdist\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip entry can hold: no build time in the wheel


def _normalise(name: str) -> str:
    """A project name as PEP 503 compares them: ``Prometheus_Client`` -> ``prometheus-client``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def worker_requirements() -> list[str]:
    """The worker's ``Requires-Dist`` lines: gpuprov's ``images`` extra (its ``extra`` marker removed) and
    the base requirements named in :data:`RUNTIME_NEEDS`, in gpuprov's metadata order.

    Raises:
        EnvironmentMissing: gpuprov's distribution metadata is not installed (a source tree on sys.path only).
    """
    try:
        declared = importlib.metadata.requires("gpuprov") or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise EnvironmentMissing(
            "the worker wheel is built from an installed gpuprov, and none is installed - pip install gpuprov"
        ) from exc
    wanted = {_normalise(n) for n in RUNTIME_NEEDS}
    out = []
    for line in declared:
        match = _NAME.match(line)
        name = _normalise(match.group(0)) if match else ""
        if ";" not in line and name in wanted:
            out.append(line)
        elif _EXTRA_MARKER.search(line):
            out.append(_EXTRA_MARKER.sub("", line).strip())
    return out


def _members(package: Path) -> list[tuple[str, bytes]]:
    """``(archive path, bytes)`` of every file of :data:`MEMBERS` under ``package`` (of a folder: its ``.py``
    files), sorted.

    Raises:
        EnvironmentMissing: a member is missing from the installed package.
    """
    files: list[tuple[str, bytes]] = []
    for member in MEMBERS:
        path = package / member
        if path.is_dir():
            # sources only: no bytecode, editor backups or caches a checkout may hold
            found = [p for p in path.rglob("*") if p.is_file() and p.suffix == ".py" and "__pycache__" not in p.parts]
        elif path.is_file():
            found = [path]
        else:
            raise EnvironmentMissing(f"the installed gpuprov has no {member} ({package}) - reinstall gpuprov")
        files.extend((f"gpuprov/{p.relative_to(package).as_posix()}", p.read_bytes()) for p in found)
    return sorted(files)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata(version: str) -> str:
    requires = worker_requirements()  # first: it raises EnvironmentMissing without gpuprov's metadata
    requires_python = importlib.metadata.metadata("gpuprov")["Requires-Python"] or ">=3.10"
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {DIST_NAME}",
        f"Version: {version}",
        "Summary: gpuprov's image workers (gpuprov images) without the controller: torch and the workers alone",
        "License: Apache-2.0",
        f"Requires-Python: {requires_python}",
        *(f"Requires-Dist: {req}" for req in requires),
    ]
    return "\n".join(lines) + "\n"


def build_worker_wheel(dest: Path) -> Path:
    """Write the worker wheel into the folder ``dest`` (created) and return its path.

    Raises:
        EnvironmentMissing: gpuprov is not installed, or its package lacks a member.
        ConfigError: ``dest`` cannot be written.
    """
    version = gpuprov.__version__
    dist_info = f"gpuprov_worker-{version}.dist-info"
    entries = _members(Path(gpuprov.__file__).parent)
    entries += [
        (f"{dist_info}/METADATA", _metadata(version).encode()),
        (f"{dist_info}/WHEEL", _WHEEL),
        (f"{dist_info}/entry_points.txt", b"[console_scripts]\ngpuprov = gpuprov.cli.__main__:main\n"),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    entries.append((f"{dist_info}/RECORD", (record + f"{dist_info}/RECORD,,\n").encode()))
    path = dest / f"gpuprov_worker-{version}-py3-none-any.whl"
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"{dest} is not a folder - name a folder for the worker wheel")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
            for name, data in entries:
                info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                wheel.writestr(info, data)
        tmp.replace(path)
    except OSError as exc:
        raise ConfigError(f"cannot write the worker wheel into {dest}: {exc.strerror or exc} - "
                          "choose a writable folder") from exc  # fmt: skip
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1] or sys.argv[1].startswith("-"):
        print("usage: python -m gpuprov.workerdist DIR  (the folder the worker wheel is written into)", file=sys.stderr)
        sys.exit(2)
    try:
        print(build_worker_wheel(Path(sys.argv[1])))
    except GpuprovError as error:
        print(f"gpuprov: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
