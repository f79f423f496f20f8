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
                                       "lnk_source": None, "target_isreg": False, "mode": None, "uid": None,
                                       "gid": None}  # fmt: skip


def test_target_isreg_follows_links_to_a_regular_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A library link is usable only when it leads to a file: a dangling link, a link to a directory and a
    directory of the library's name are not."""
    (tmp_path / "libnvidia-ml.so.580.95.05").write_text("")
    (tmp_path / "lib").mkdir()
    (tmp_path / "ok.so.1").symlink_to("libnvidia-ml.so.580.95.05")
    (tmp_path / "chain.so.1").symlink_to("ok.so.1")
    (tmp_path / "dangling.so.1").symlink_to("libnvidia-ml.so.570.00.00")
    (tmp_path / "to_dir.so.1").symlink_to("lib")
    (tmp_path / "dir.so.1").mkdir()
    names = ["libnvidia-ml.so.580.95.05", "ok.so.1", "chain.so.1", "dangling.so.1", "to_dir.so.1", "dir.so.1"]
    code, result = run({"paths": [str(tmp_path / n) for n in names]}, capsys)
    assert code == 0
    assert {n: result["paths"][str(tmp_path / n)]["target_isreg"] for n in names} == {
        "libnvidia-ml.so.580.95.05": True, "ok.so.1": True, "chain.so.1": True,
        "dangling.so.1": False, "to_dir.so.1": False, "dir.so.1": False}
    assert result["paths"][str(tmp_path / "dangling.so.1")]["exists"] is True  # lstat's answer is unchanged


def test_links_under_a_link_root_resolve_inside_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A containerised driver's root (/run/nvidia/driver) is read by the container toolkit as its own ``/``: an
    absolute link target starts again at the root and ``..`` stops there, so a link that resolves only through
    the host's own files is not the library, and one with an absolute target inside the root is."""
    root = tmp_path / "driver"
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)  # a library name no host has, so the host's own files decide nothing
    (lib / "libnvidia-ml.so.0.0.test").write_text("")
    host_file = tmp_path / "host-only.so"  # on the host, not under the root
    host_file.write_text("")
    links = {
        "absolute.so.1": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.0.0.test",  # as inside the root: a file
        "relative.so.1": "libnvidia-ml.so.0.0.test",
        "escapes.so.1": "../../../../../../../../lib/x86_64-linux-gnu/libnvidia-ml.so.0.0.test",  # .. stops at root
        "host_only.so.1": str(host_file),  # a file on the host, absent under the root
        "via_dir.so.1": "/usr/lib/../lib/x86_64-linux-gnu/libnvidia-ml.so.0.0.test",
    }
    for name, target in links.items():
        (lib / name).symlink_to(target)
    (root / "lib").symlink_to("usr/lib")  # a merged-/usr root: lib -> usr/lib
    paths = [str(lib / n) for n in links]
    code, result = run({"paths": paths, "link_roots": [str(tmp_path), str(root)]}, capsys)
    assert code == 0, result
    assert {n: result["paths"][str(lib / n)]["target_isreg"] for n in links} == {
        "absolute.so.1": True, "relative.so.1": True, "escapes.so.1": True, "host_only.so.1": False,
        "via_dir.so.1": True}
    # a directory link in the middle of the path is followed inside the root too: lib64 -> /usr/lib/x86_64-linux-gnu
    # holds the library under the root, while on the host that target has none; host_lib -> a folder of the host
    # holding a file of that name, which the root does not have
    (root / "usr" / "lib64").symlink_to("/usr/lib/x86_64-linux-gnu")
    host_dir = tmp_path / "host-lib"
    host_dir.mkdir()
    (host_dir / "libnvidia-ml.so.1").write_text("")
    (root / "host_lib").symlink_to(host_dir)
    (lib / "libnvidia-ml.so.1").write_text("")
    middle = {str(root / "usr" / "lib64" / "libnvidia-ml.so.0.0.test"): True,  # absent on the host
              str(root / "host_lib" / "libnvidia-ml.so.1"): False,  # a regular file on the host
              f"{lib}/libnvidia-ml.so.0.0.test/": False,  # a file taken for a directory: ENOTDIR
              f"/{root}//usr/lib/../lib/x86_64-linux-gnu/libnvidia-ml.so.0.0.test": True,
              str(root / ".." / "host-only.so"): True}  # outside the root (its ".."): read as the host reads it
    code, result = run({"paths": list(middle), "link_roots": [f"/{root}/"]}, capsys)
    assert code == 0, result
    assert {p: result["paths"][p]["target_isreg"] for p in middle} == middle
    assert result["paths"][str(root / "usr" / "lib64" / "libnvidia-ml.so.0.0.test")]["exists"] is False  # on the host
    # the same links read as the host reads them (no root): the absolute ones point outside the tree
    code, result = run({"paths": paths}, capsys)
    assert {n: result["paths"][str(lib / n)]["target_isreg"] for n in links} == {
        "absolute.so.1": False, "relative.so.1": True, "escapes.so.1": False, "host_only.so.1": True,
        "via_dir.so.1": False}
    assert result["paths"][str(lib / "host_only.so.1")]["lnk_source"] == str(host_file)


def test_command_output_that_is_not_utf8_is_read_with_replacements(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """One path in another encoding in `ldconfig -p` must not fail the read of every other line."""
    script = tmp_path / "ldconfig"
    script.write_bytes(b"#!/bin/sh\nprintf 'libx.so (libc6,x86-64) => /opt/caf\\351/libx.so\\n"
                       b"libnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/libnvidia-ml.so.1\\n'\n")
    script.chmod(0o755)
    code, result = run({"commands": {"ldconfig": [str(script), "-p"]}}, capsys)
    assert code == 0, result
    out = result["commands"]["ldconfig"]["stdout"]
    assert result["commands"]["ldconfig"]["rc"] == 0
    assert "/opt/caf\ufffd/libx.so" in out and "=> /usr/lib/libnvidia-ml.so.1" in out


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


def test_only_a_paths_absence_reads_as_absent_and_paths_are_absolute(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    under_a_file = str(tmp_path / "file" / "cgroup.controllers")  # ENOTDIR: a parent is not a directory
    code, result = run({"paths": [f"{tmp_path}//file", under_a_file]}, capsys)
    assert code == 0
    assert result["paths"][f"{tmp_path}//file"]["isreg"] is True  # keyed as given, not normalised
    assert result["paths"][under_a_file]["exists"] is False
    code, result = run({"paths": ["~/cgroup"], "read": ["etc/os-release"]}, capsys)
    assert code == 1 and result["msg"] == ("paths, link_roots and read take absolute paths; not absolute: ~/cgroup, "
                                           "etc/os-release")
    looped = str(tmp_path / "loop-a" / "libnvidia-ml.so.1")  # ELOOP says nothing of whether it exists
    code, result = run({"paths": [looped]}, capsys)
    assert code == 1 and result["msg"].startswith(f"cannot read {looped}: Too many levels of symbolic links")
    # a loop met only while following the link (lstat of the link itself succeeds), on the host or inside a root:
    # the link exists and leads to no file (another library directory may still hold the library)
    for roots in ([], [str(tmp_path)]):
        code, result = run({"paths": [str(tmp_path / "loop-a")], "link_roots": roots}, capsys)
        assert code == 0 and result["paths"][str(tmp_path / "loop-a")]["exists"] is True, roots
        assert result["paths"][str(tmp_path / "loop-a")]["target_isreg"] is False, roots


def test_a_bare_package_name_is_the_native_architectures(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # dpkg-query sorts by architecture: a foreign package's line comes after the native one's
    listing = ("libnvidia-container1\tamd64\t1.17.8-1\tinstall ok installed\n"
               "libnvidia-container1\ti386\t1.7.0-1\tinstall ok installed\n"
               "libnvidia-container-tools\tarm64\t1.17.8-1\tdeinstall ok config-files\n")

    def run_command(self: Any, argv: list[str], **_: Any) -> tuple[int, str, str]:
        return (0, "amd64\n", "") if "--print-architecture" in argv else (0, listing, "")

    monkeypatch.setattr(host_state.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(host_state.AnsibleModule, "get_bin_path", lambda self, name, **_: f"/usr/bin/{name}")
    # apt marks the foreign build automatically installed, the native one not
    monkeypatch.setattr(host_state, "read_text", lambda path: (
        "Package: libnvidia-container1\nArchitecture: i386\nAuto-Installed: 1\n\n"
        "Package: libnvidia-container1\nArchitecture: amd64\nAuto-Installed: 0\n"))
    code, result = run({"packages": ["libnvidia-container*"]}, capsys)
    assert code == 0
    assert result["versions"] == {"libnvidia-container1": "1.17.8-1", "libnvidia-container1:i386": "1.7.0-1"}
    assert result["selections"]["libnvidia-container-tools:arm64"] == "deinstall"
    assert result["auto_installed"] == ["libnvidia-container1:i386"]
