"""Where a run's fork server listens (:mod:`gpuprov.images.forkserver`): the user's private folder, and the socket's
name, a digest of what the server's imports and its workers' surroundings depend on.

Public API::

    runtime_dir(environ) -> Path | None              # the user's private folder for sockets; None: none usable
    server_key(environ) -> str                       # 16 hex digits: install, load-time environment, cgroup
    socket_path(environ) -> Path | None              # where this install's server listens; None: no private folder
    run_socket(keep_warm_s, follow, compiled) -> Path | None   # the socket a run uses; None: no fork server
    own_scope() -> str                               # this process's cgroup and namespaces
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

MAX_SOCKET_PATH = 108
"""Bytes of a Unix socket's path, its terminating NUL included (``sun_path`` of ``sockaddr_un`` on Linux, unix(7))."""
#: environment variables read when Python and the libraries load (not later): the server's key, since a forked
#: worker keeps what its server loaded
LOAD_TIME_PREFIXES = ("LD_", "PYTHON", "TORCH", "TRITON", "CUDA", "NVIDIA", "OMP_", "MKL_", "KMP_", "OPENBLAS")
#: variables a run sets per worker, read when the worker opens its device (after the fork): not in the key
PER_WORKER_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MPS_PIPE_DIRECTORY",
                            "CUDA_MPS_LOG_DIRECTORY", "PYTHONUNBUFFERED"})  # fmt: skip
#: the packages a server imports besides gpuprov (gpuprov.images.worker.preload): an upgrade of one starts a new server
PRELOADED = ("torch", "torchvision", "triton", "numpy", "PIL")


def runtime_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The user's private folder for the server's socket: ``$XDG_RUNTIME_DIR/gpuprov`` where that folder is this
    user's own with mode 0700 (not where ``su`` or ``sudo`` kept another user's: that user could swap the folder
    in it), else ``gpuprov-<uid>`` in the temporary folder; created mode 0700. None where it cannot be made or is
    not private (another owner, or group or other may enter it; one warning says which): no fork server is used
    then."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_RUNTIME_DIR")
    private = Path(base) / "gpuprov" if base and _own_private(Path(base)) else None
    folder = private or Path(tempfile.gettempdir()) / f"gpuprov-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, parents=False, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None
    if not folder.is_dir() or folder.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o077:
        log.warning("no fork server: %s is not a private folder of this user's (owner uid %d, mode %o); make it "
                    "one (chmod 700) or remove it", folder, info.st_uid, info.st_mode & 0o7777)  # fmt: skip
        return None
    return folder


def _own_private(folder: Path) -> bool:
    """Whether ``folder`` is a folder of this user's that group and other cannot enter or write."""
    try:
        info = folder.stat()
    except OSError:
        return False
    return folder.is_dir() and info.st_uid == os.getuid() and not info.st_mode & 0o077


def server_key(environ: Mapping[str, str] | None = None) -> str:
    """A digest (16 hex digits) of what a server's imports depend on: the Python, gpuprov's code, the installs of
    :data:`PRELOADED`, and the load-time environment variables (:data:`LOAD_TIME_PREFIXES`, not
    :data:`PER_WORKER_ENV`); and of this process's cgroup and namespaces (:func:`own_scope`), as the server serves
    only its own: without them, a server left by one login session (or job, or container sharing the folder) would
    hold the socket of every later one, refuse their requests and keep them from starting theirs."""
    env = os.environ if environ is None else environ
    package = Path(__file__).resolve().parent.parent
    newest = max((p.stat().st_mtime_ns for p in package.rglob("*.py")), default=0)
    installs = [_install(name) for name in PRELOADED]
    loaded = sorted((k, v) for k, v in env.items() if k.startswith(LOAD_TIME_PREFIXES) and k not in PER_WORKER_ENV)
    text = json.dumps([sys.executable, sys.version, str(package), newest, installs, loaded, own_scope()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _install(name: str) -> tuple[str, int]:
    """Where top-level package ``name`` is installed and when that was (its ``__init__``'s modification time,
    nanoseconds), found without importing it; ``("", 0)`` where it is not installed."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    origin = spec.origin if spec is not None and spec.origin else ""
    try:
        return origin, Path(origin).stat().st_mtime_ns if origin else 0
    except OSError:
        return origin, 0


def socket_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where the server for this install and environment listens (:func:`runtime_dir`, :func:`server_key`); None
    without a private folder, or where the path is too long for a Unix socket (:data:`MAX_SOCKET_PATH`)."""
    folder = runtime_dir(environ)
    if folder is None:
        return None
    path = folder / f"images-{server_key(environ)}.sock"
    return path if len(os.fsencode(path)) < MAX_SOCKET_PATH else None


def run_socket(keep_warm_s: float, follow: bool, compiled: bool,
               environ: Mapping[str, str] | None = None) -> Path | None:  # fmt: skip
    """The socket a run's workers are asked of (:func:`socket_path`), or None where a run uses no fork server:
    ``keep_warm_s`` 0, a ``--follow`` service (its workers live for days: nothing to save, and they stay in the
    service's cgroup), a model ``compiled`` with ``torch.compile`` (its cache settings are read when torch is
    imported, before the run's environment reaches a forked worker), or no private folder for the socket."""
    if keep_warm_s <= 0 or follow or compiled:
        return None
    return socket_path(environ)


#: the namespaces a forked worker shares with its server (``/proc/self/ns/``): a run in others (a container) must
#: not get one, whose files, network and processes would be the server's
NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts")


def own_scope() -> str:
    """This process's cgroup (``/proc/self/cgroup``) and namespaces (``/proc/self/ns/*`` links, ``mnt:[4026531841]``):
    what a forked worker would take from its server, not from its run. Inside a cgroup namespace the cgroup reads
    as ``0::/`` in every container, so the namespaces tell two containers apart. A part that cannot be read is
    ``?``."""
    try:
        cgroup = Path("/proc/self/cgroup").read_text(encoding="utf-8")
    except OSError:
        cgroup = "?"
    spaces = []
    for name in NAMESPACES:
        try:
            spaces.append(str(Path(f"/proc/self/ns/{name}").readlink()))
        except OSError:
            spaces.append(f"{name}:?")
    return cgroup + " ".join(spaces)
