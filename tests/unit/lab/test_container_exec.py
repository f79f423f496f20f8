"""exec_output: the command's output comes from the file it wrote, not from docker exec's attached stream, which
can lose a short command's output. The container here is this machine: its ``exec_run`` runs the command with
subprocess and, as the stream does when it loses the race, returns no output."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import docker.errors

from gpuprov.lab.container_exec import exec_output


class LocalContainer:
    """Runs commands here; ``exec_run`` drops their output, ``get_archive`` reads a file as docker's archive API."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def exec_run(self, argv: list[str], user: str = "") -> tuple[int, bytes]:
        self.calls.append(argv)
        return subprocess.run(argv, capture_output=True, check=False).returncode, b""

    def get_archive(self, path: str) -> tuple[list[bytes], dict[str, Any]]:
        if not Path(path).exists():
            raise docker.errors.NotFound(f"Could not find the file {path} in container")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(path, arcname=Path(path).name)
        return [buffer.getvalue()], {"name": Path(path).name}


def test_the_output_is_read_from_the_file_and_the_file_removed() -> None:
    box = LocalContainer()
    code, text = exec_output(box, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (code, text) == (3, "out\nerr\n")
    output_file = box.calls[0][3]
    assert box.calls[-1] == ["rm", "-f", output_file] and not Path(output_file).exists()


def test_a_command_that_removed_its_output_file_gives_the_streamed_output() -> None:
    box = LocalContainer()
    code, text = exec_output(box, ["sh", "-c", 'rm -f "$(readlink /proc/$$/fd/1)"; echo gone'])
    assert (code, text) == (0, "")
