"""Lab base images: Debian roots built locally with debootstrap and imported into Docker.

One image per lab OS, ``gpuprov-lab-<os>``; what each is built from (Debian suite, apt sources, the Ubuntu
release a stand-in is dressed as) is in :mod:`gpuprov.lab.imagespecs`: ``debian12`` and the labelled
stand-ins ``ubuntu2004`` (Debian 11 underneath), ``ubuntu2204`` (Debian 12) and ``ubuntu2404`` (Debian 13),
each with ``/etc/gpuprov-standin`` plus the image label ``org.gpuprov.lab.standin`` saying what it really is.

A build is ``debootstrap --variant=minbase --include=<recipes/packages.txt>`` from the machine's own
Debian mirror (:mod:`gpuprov.lab.mirrors`), then ``recipes/configure.sh`` in a chroot, then the root
is streamed as a tar into ``docker import``. Images are tagged ``NAME:<recipe hash>`` and
``NAME:latest`` and carry the hash in the label :data:`LABEL_HASH`; :func:`ensure_image` builds only
when no image with the current hash exists. Downloaded packages are cached under
``$XDG_CACHE_HOME/gpuprov/lab/debootstrap/<suite>`` so a rebuild mostly skips the downloads.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprov import resources
from gpuprov.exceptions import EnvironmentMissing
from gpuprov.lab import dockerenv
from gpuprov.lab.imagespecs import ImageSpec, lsb_release, os_release, spec_for
from gpuprov.lab.mirrors import Mirrors, read_mirrors

log = logging.getLogger(__name__)

RECIPE_DIR = Path(__file__).with_name("recipes")
IMAGE_PREFIX = "gpuprov-lab-"
LABEL_HASH = "org.gpuprov.lab.recipe-hash"
LABEL_OS = "org.gpuprov.lab.os"
LABEL_STANDIN = "org.gpuprov.lab.standin"
#: Bump when the build procedure in this module changes in a way that changes the image.
BUILD_PROCEDURE_VERSION = 3


@dataclass(frozen=True)
class BuildResult:
    """A finished build: image ``ref`` (``NAME:HASH``), wall ``seconds``, image ``size_bytes`` and
    ``steps``: seconds per step (``debootstrap``, ``configure``, ``import``)."""

    ref: str
    seconds: float
    size_bytes: int
    steps: dict[str, float] = dataclasses.field(default_factory=dict)


def image_name(os_name: str) -> str:
    """``gpuprov-lab-<os_name>``; raises :class:`~gpuprov.exceptions.ConfigError` for an unknown OS."""
    return IMAGE_PREFIX + spec_for(os_name).os_name


def packages(recipe_dir: Path = RECIPE_DIR) -> list[str]:
    """The package names in ``recipe_dir/packages.txt`` (comments and blank lines skipped)."""
    text = (recipe_dir / "packages.txt").read_text(encoding="utf-8")
    return [w for line in text.splitlines() for w in line.split("#", 1)[0].split()]


def _recipe_files(recipe_dir: Path) -> Iterator[Path]:
    for path in sorted(recipe_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path


def recipe_hash(spec: ImageSpec, recipe_dir: Path = RECIPE_DIR) -> str:
    """A 12-hex-digit SHA-256 over the spec, every file under ``recipe_dir`` and the build procedure.

    The mirror is not an input: it is a property of the machine, and images are local to it.
    """
    digest = hashlib.sha256()
    head = {"procedure": BUILD_PROCEDURE_VERSION, "spec": dataclasses.asdict(spec)}
    digest.update(json.dumps(head, sort_keys=True).encode())
    for path in _recipe_files(recipe_dir):
        digest.update(b"\0" + path.relative_to(recipe_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def cache_dir(suite: str) -> Path:
    """Where debootstrap keeps downloaded ``.deb`` files for ``suite`` (created on use)."""
    return resources.cache_dir() / "lab" / "debootstrap" / suite


def check_build_environment() -> None:
    """Raise :class:`~gpuprov.exceptions.EnvironmentMissing` unless this process can build images.

    Needs root (debootstrap and chroot) and ``debootstrap`` and ``tar`` on PATH.
    """
    if os.geteuid() != 0:
        raise EnvironmentMissing(
            "building the lab images needs root (debootstrap and chroot): run `sudo gpuprov lab images`"
        )
    for tool, package in (
        ("debootstrap", "debootstrap"),
        ("tar", "tar"),
        ("chroot", "coreutils"),
        ("unshare", "util-linux"),
    ):
        if shutil.which(tool) is None:
            raise EnvironmentMissing(
                f"`{tool}` is not on PATH: install it (`apt-get install {package}`) to build the lab images"
            )


def find_image(client: Any, os_name: str) -> str | None:
    """``NAME:HASH`` if an image with the current recipe hash exists locally, else ``None``."""
    ref = f"{image_name(os_name)}:{recipe_hash(spec_for(os_name))}"
    return ref if dockerenv.image_exists(client, ref) else None


def ensure_image(os_name: str, *, rebuild: bool = False, client: Any = None) -> str:
    """Return the reference ``gpuprov-lab-<os>:<recipe hash>`` of an up-to-date lab image.

    Builds it (a few minutes; needs root, debootstrap and the mirror) when it is missing or when
    ``rebuild`` is true; otherwise only makes sure ``:latest`` points at it. Raises
    :class:`~gpuprov.exceptions.ConfigError` for an unknown OS and
    :class:`~gpuprov.exceptions.EnvironmentMissing` when Docker or a build tool is missing or the
    build fails.
    """
    ref, _ = ensure_image_result(os_name, rebuild=rebuild, client=client)
    return ref


def ensure_image_result(os_name: str, *, rebuild: bool = False, client: Any = None) -> tuple[str, BuildResult | None]:
    """Like :func:`ensure_image`, also returning the :class:`BuildResult` (``None`` when cached)."""
    spec = spec_for(os_name)
    client = client or dockerenv.client()
    ref = None if rebuild else find_image(client, os_name)
    result = None
    if ref is None:
        with _build_lock(spec):  # a concurrent build of the same image finishes first, then is reused
            ref = None if rebuild else find_image(client, os_name)
            if ref is None:
                result = build_image(spec, client=client)
                ref = result.ref
    dockerenv.tag(client, ref, image_name(os_name), "latest")
    return ref, result


@contextlib.contextmanager
def _build_lock(spec: ImageSpec) -> Iterator[None]:
    """Hold an exclusive flock on ``<cache>/<image>.lock`` for the duration of a build."""
    path = cache_dir(spec.suite).parent / f"{image_name(spec.os_name)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_image(spec: ImageSpec, *, client: Any = None, mirrors: Mirrors | None = None) -> BuildResult:
    """Build, import and tag the image of ``spec``; returns the :class:`BuildResult`.

    Raises :class:`~gpuprov.exceptions.EnvironmentMissing` when a tool is missing, no mirror is known,
    or a build step fails (the message carries the tail of that step's output).
    """
    check_build_environment()
    client = client or dockerenv.client()
    mirrors = mirrors or read_mirrors()
    name, digest = image_name(spec.os_name), recipe_hash(spec)
    started = time.monotonic()
    log.info("building %s:%s from %s (%s)", name, digest, mirrors.debian, spec.suite)
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir="/var/tmp"))
    steps: dict[str, float] = {}
    try:
        root = workdir / "rootfs"
        log.info("%s: debootstrap %s (download and unpack %d packages)", name, spec.suite, len(packages()))
        _debootstrap(spec, mirrors, root)
        steps["debootstrap"] = time.monotonic() - started
        log.info("%s: configure (recipes/configure.sh in a chroot: users, units, initramfs)", name)
        _configure(spec, mirrors, root)
        steps["configure"] = time.monotonic() - started - sum(steps.values())
        log.info("%s: docker import", name)
        labels = {
            LABEL_HASH: digest,
            LABEL_OS: spec.os_name,
            LABEL_STANDIN: spec.standin_note or "no",
            "org.opencontainers.image.title": name,
        }
        dockerenv.import_rootfs(client, root, name, digest, labels)
        steps["import"] = time.monotonic() - started - sum(steps.values())
    finally:
        _remove_tree(workdir)
    dockerenv.tag(client, f"{name}:{digest}", name, "latest")
    dockerenv.remove_stale_tags(client, name, keep={digest, "latest"})
    seconds = time.monotonic() - started
    size = dockerenv.image_size(client, f"{name}:{digest}")
    log.info("built %s:%s in %.0f s (%d MB): %s", name, digest, seconds, size // 10**6, steps)
    return BuildResult(f"{name}:{digest}", seconds, size, steps)


def _run(step: str, argv: list[str], env: dict[str, str] | None = None,
         on_line: Callable[[str], None] | None = None) -> None:
    """Run one build step, handing each line of its output to ``on_line``; on failure raise EnvironmentMissing
    with the output's last lines."""
    log.debug("lab build: %s", " ".join(argv))
    tail: collections.deque[str] = collections.deque(maxlen=25)
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            if on_line is not None:
                on_line(line.rstrip("\n"))
    if proc.returncode != 0:
        raise EnvironmentMissing(
            f"lab image build failed at {step} (exit {proc.returncode}); check the mirror and network, "
            f"then rerun `gpuprov lab images --rebuild`:\n" + "\n".join(tail)
        )


def _debootstrap_stages(name: str) -> Callable[[str], None]:
    """An ``on_line`` that logs each new debootstrap stage once (``I: Retrieving``, ``I: Extracting``,
    ``I: Configuring``, ...), not each package."""
    seen: set[str] = set()

    def on_line(line: str) -> None:
        if not line.startswith("I: "):
            return
        words = line[3:].split()
        stage = " ".join(words[:1] if len(words) > 2 else words)  # "Retrieving libc6 2.36" -> "Retrieving"
        if stage not in seen:
            seen.add(stage)
            log.info("%s: debootstrap: %s", name, line[3:])

    return on_line


def _debootstrap(spec: ImageSpec, mirrors: Mirrors, root: Path) -> None:
    """debootstrap without fsync (DPKG_FORCE=unsafe-io: a crash only loses a throw-away build) and
    without the kernel hook's initramfs (INITRD=No): configure.sh builds it once, at the end."""
    env = dict(os.environ, DPKG_FORCE="unsafe-io", INITRD="No")
    cache = cache_dir(spec.suite)
    cache.mkdir(parents=True, exist_ok=True)
    _run(
        "debootstrap",
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages())}",
            f"--components={','.join(spec.components)}",
            f"--cache-dir={cache}",
            spec.suite,
            str(root),
            mirrors.debian,
        ],
        env,
        _debootstrap_stages(image_name(spec.os_name)),
    )


def _configure(spec: ImageSpec, mirrors: Mirrors, root: Path) -> None:
    script = root / "tmp" / "gpuprov-configure.sh"
    shutil.copyfile(RECIPE_DIR / "configure.sh", script)
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "GPUPROV_SUITE": spec.suite,
        "GPUPROV_MIRROR": mirrors.debian,
        "GPUPROV_SECURITY_MIRROR": mirrors.security or "",
        "GPUPROV_COMPONENTS": " ".join(spec.components),
        "GPUPROV_SOURCES_FORMAT": spec.sources_format,
        "GPUPROV_SOURCES_FILE": spec.sources_file,
        "GPUPROV_STANDIN_NOTE": spec.standin_note,
        "GPUPROV_OS_RELEASE": os_release(spec.standin) if spec.standin else "",
        "GPUPROV_LSB_RELEASE": lsb_release(spec.standin) if spec.standin else "",
    }
    # A private mount namespace: /proc exists for update-initramfs and vanishes with the namespace.
    inner = "mount -t proc proc /proc && exec /bin/sh /tmp/gpuprov-configure.sh"
    _run(
        "recipes/configure.sh",
        ["unshare", "--mount", "--propagation", "private", "chroot", str(root), "/bin/sh", "-c", inner],
        env,
    )
    script.unlink(missing_ok=True)


def _remove_tree(path: Path) -> None:
    """Delete a build directory, refusing if anything is still mounted below it."""
    mounts = Path("/proc/self/mounts").read_text(encoding="utf-8").split("\n")
    prefix = str(path.resolve()) + "/"
    busy = [m.split()[1] for m in mounts if m and m.split()[1].startswith(prefix)]
    if busy:
        log.warning("not removing %s: still mounted below it: %s", path, ", ".join(busy))
        return
    shutil.rmtree(path, ignore_errors=True)
