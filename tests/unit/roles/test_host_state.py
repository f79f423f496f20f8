"""host_state: paths, files, packages and read-only commands read in one call, against a temporary tree and
this machine's dpkg."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuprov.gpu.plugins.modules import host_state


def run(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        host_state.main()
    return int(exc.value.code or 0), json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("check_mode", [False, True])
def test_paths_files_and_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str], check_mode: bool) -> None:
    # a SONAME link chain as NVIDIA's packages ship it: libnccl.so.2 -> libnccl.so.2.26.2
    (tmp_path / "libnccl.so.2.26.2").write_text("")
    (tmp_path / "libnccl.so.2").symlink_to("libnccl.so.2.26.2")
    (tmp_path / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    (tmp_path / "bad.h").write_bytes(b"\xff\n")
    lib, header, bad, absent = (str(tmp_path / n) for n in ("libnccl.so.2", "nccl.h", "bad.h", "absent"))
    code, result = run(
        {
            "paths": [lib, str(tmp_path), absent],
            "read": [header, bad, absent],
            "commands": {
                "echo": ["echo", "ok"],
                "fails": ["false"],
                "none": ["no-such-program-x"],
                "gone": [absent, "--version"],
            },
            "_ansible_check_mode": check_mode,
        },
        capsys,
    )
    assert code == 0 and result["changed"] is False
    link = result["paths"][lib]
    assert (link["exists"], link["islnk"], link["isdir"], link["isreg"]) == (True, True, False, False)
    assert link["lnk_source"] == str(tmp_path / "libnccl.so.2.26.2")
    assert result["files"] == {header: "#define NCCL_MAJOR 2\n", bad: "\ufffd\n", absent: None}
    assert result["commands"]["echo"] == {"rc": 0, "stdout": "ok\n", "stderr": ""}
    assert result["commands"]["fails"]["rc"] == 1  # returned, not a failure
    assert result["commands"]["none"]["rc"] == 127
    assert "no-such-program-x is not installed" in result["commands"]["none"]["stderr"]
    assert result["commands"]["gone"]["rc"] == 127  # an absolute path that does not exist: not run
    # no packages asked for: none read
    assert result["versions"] == {} and result["selections"] == {} and result["auto_installed"] == []
    Path(header).chmod(0o640)
    code, result = run({"paths": [header, str(tmp_path), absent]}, capsys)
    assert result["paths"][header]["mode"] == "0640" and result["paths"][header]["isreg"] is True
    assert result["paths"][header]["uid"] == os.getuid() and result["paths"][header]["gid"] == os.getgid()
    assert result["paths"][str(tmp_path)]["isdir"] is True
    assert result["paths"][absent] == {"exists": False, "islnk": False, "isdir": False, "isreg": False,
                                       "lnk_source": None, "mode": None, "uid": None, "gid": None}  # fmt: skip


def test_a_command_that_is_not_an_argv_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, result = run({"commands": {"ldconfig": "ldconfig -p"}}, capsys)
    assert code == 1
    assert "commands.ldconfig must be a non-empty list of strings" in result["msg"]


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query")
def test_packages_of_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code, result = run({"packages": ["dpkg", "no-such-package-x"]}, capsys)
    assert code == 0
    assert set(result["versions"]) == {"dpkg"} and result["versions"]["dpkg"]
    assert result["selections"]["dpkg"] in ("install", "hold")
    assert set(result["auto_installed"]) <= {"dpkg"}
