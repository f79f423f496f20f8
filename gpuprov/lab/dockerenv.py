"""Thin helpers over the ``docker`` Python SDK, turning Docker trouble into EnvironmentMissing.

Everything here takes a ``docker.DockerClient`` (typed ``Any``: the SDK ships no type hints).
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gpuprov.exceptions import EnvironmentMissing

log = logging.getLogger(__name__)

#: Seconds a Docker API call may take; an image import streams hundreds of MB.
API_TIMEOUT_S = 900


def client() -> Any:
    """A connected ``docker.DockerClient`` (from ``DOCKER_HOST`` or the default socket).

    Raises :class:`~gpuprov.exceptions.EnvironmentMissing` when the SDK is not installed or the
    daemon does not answer, saying how to fix it.
    """
    try:
        import docker
        import docker.errors
    except ImportError as exc:  # the runtime install has no Docker SDK; the lab extra brings it
        raise EnvironmentMissing(
            "the `docker` Python package is missing: `gpuprov lab` needs `pip install 'gpuprov[lab]'`"
        ) from exc
    try:
        c = docker.from_env(timeout=API_TIMEOUT_S)
        c.ping()
    except docker.errors.DockerException as exc:
        raise EnvironmentMissing(
            "cannot reach the Docker daemon "
            f"({exc}): install Docker and start it (`systemctl start docker`, or run `dockerd &` "
            "as root), and check that this user may use its socket (DOCKER_HOST, group `docker`)"
        ) from exc
    return c


def image_exists(c: Any, ref: str) -> bool:
    """Whether the local image ``ref`` (``NAME:TAG``) exists."""
    import docker.errors

    try:
        c.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def image_size(c: Any, ref: str) -> int:
    """Size of image ``ref`` in bytes (as ``docker images`` reports it)."""
    return int(c.images.get(ref).attrs.get("Size", 0))


def tag(c: Any, ref: str, repository: str, tag_name: str) -> None:
    """Tag the existing image ``ref`` as ``repository:tag_name`` (moving the tag if it exists)."""
    c.images.get(ref).tag(repository, tag_name)


def remove_stale_tags(c: Any, repository: str, keep: set[str]) -> None:
    """Untag ``repository:*`` tags not in ``keep``; tags still used by a container are left alone."""
    import docker.errors

    for image in c.images.list(name=repository):
        for ref in image.tags:
            repo, _, tag_name = ref.rpartition(":")
            if repo == repository and tag_name not in keep:
                try:
                    c.images.remove(ref)
                    log.info("removed stale lab image tag %s", ref)
                except docker.errors.APIError as exc:
                    log.debug("kept %s: %s", ref, exc)


def _tar_chunks(proc: subprocess.Popen[bytes]) -> Iterator[bytes]:
    assert proc.stdout is not None
    while chunk := proc.stdout.read(1 << 20):
        yield chunk


def import_rootfs(c: Any, root: Path, repository: str, tag_name: str, labels: Mapping[str, str]) -> None:
    """Stream directory ``root`` as a tar into ``docker import`` as ``repository:tag_name``.

    The image runs ``/lib/systemd/systemd`` with ``container=docker`` (``docker import`` cannot set a
    STOPSIGNAL: containers get SIGRTMIN+3 at run time). Raises EnvironmentMissing when tar or the
    import fails.
    """
    changes = [
        "ENV container=docker",
        'CMD ["/lib/systemd/systemd"]',
        *(f"LABEL {key}={_quote(value)}" for key, value in sorted(labels.items())),
    ]
    argv = ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", str(root), "-c", "."]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            result = c.api.import_image(
                src=_tar_chunks(proc), repository=repository, tag=tag_name, changes=changes, stream_src=True
            )
        finally:
            _, err = proc.communicate()
    if proc.returncode != 0:
        raise EnvironmentMissing(f"tar of the lab root {root} failed: {err.decode(errors='replace')}")
    log.debug("docker import: %s", result)
    if not image_exists(c, f"{repository}:{tag_name}"):
        raise EnvironmentMissing(f"docker import of {repository}:{tag_name} did not create it: {result}")


def _quote(value: str) -> str:
    """A Dockerfile LABEL value in double quotes."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
