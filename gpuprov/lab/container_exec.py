"""A command run in a lab container, its output read back whole.

``docker exec`` hands the output over a stream attached to the new process, and a command that ends quickly can
end before the stream is attached: the exec reports exit 0 and no output (moby/moby#27289, docker/docker-py#2042).
A test reading a checksum or a unit's ``ExecStart`` then reads an empty string. Here the command writes its output
to a file in the container, which is read back through the archive API once the exec has ended.

Public API::

    exec_output(container, argv, user="root") -> (exit code, stdout and stderr together as text)
"""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Sequence
from typing import Any

#: where the output file goes: on the container's own file system (the archive API does not read tmpfs mounts such as
#: /dev/shm or a systemd container's /run), and not /tmp, which systemd-tmpfiles cleans while such a container boots
OUTPUT_DIR = "/var/tmp"


def exec_output(container: Any, argv: Sequence[str], user: str = "root") -> tuple[int, str]:
    """Run ``argv`` in ``container`` (a docker SDK container) as ``user``; return its exit code and its stdout and
    stderr together, decoded as UTF-8 with replacement. A command that removed or could not write the output file
    (it stopped the container, say) gives the output ``docker exec`` streamed instead. Raises the docker SDK's
    errors for a container that is gone."""
    import docker.errors  # the lab extra; a container object means it is installed

    path = f"{OUTPUT_DIR}/gpuprov-exec-{uuid.uuid4().hex}"
    code, streamed = container.exec_run(["/bin/sh", "-c", '"$@" > "$0" 2>&1', path, *argv], user=user)
    try:
        chunks, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            data = member.read() if member is not None else streamed
    except (docker.errors.NotFound, docker.errors.APIError, tarfile.TarError, IndexError):  # no file
        data = streamed
    container.exec_run(["rm", "-f", path], user=user)
    return int(code), data.decode(errors="replace")
