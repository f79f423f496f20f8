"""deb_apt_state: apt's auto-installed marks parsed from extended_states, the lists' age the way
ansible.builtin.apt measures it for cache_valid_time, and the module run against this machine's dpkg and apt."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from types import ModuleType

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuprov.gpu.plugins.module_utils import aptstate, deb
from ansible_collections.gpuprov.gpu.plugins.modules import apt_lists_refresh, deb_apt_state

UTILS = deb
APTSTATE = aptstate

# /var/lib/apt/extended_states as apt writes it (apt-mark auto/manual): dkms pulled in by nvidia-dkms-535,
# gcc-12 by gcc, an i386 library, a package marked manual again (Auto-Installed: 0), and a torn last stanza.
EXTENDED = (
    "Package: dkms\nArchitecture: amd64\nAuto-Installed: 1\n\n"
    "Package: gcc-12\nArchitecture: amd64\nAuto-Installed: 1\n\n"
    "Package: libnvidia-compute-535\nArchitecture: i386\nAuto-Installed: 1\n\n"
    "Package: make\nArchitecture: amd64\nAuto-Installed: 0\n\n"
    "Package: python3-debian\nArchitecture: all\nAuto-Installed: 1\n\n"
    "Package: torn\n"
)


def test_extended_states_lists_only_auto_marks() -> None:
    assert APTSTATE.parse_extended_states(EXTENDED) == ["dkms", "gcc-12", "libnvidia-compute-535",
                                                        "python3-debian"]
    # keyed like parse_dpkg_query: with the native architecture a foreign one is qualified
    assert "libnvidia-compute-535:i386" in APTSTATE.parse_extended_states(EXTENDED, "amd64")
    assert "make" not in APTSTATE.parse_extended_states(EXTENDED, "amd64")
    assert APTSTATE.parse_extended_states("") == []


# a package index as apt names it under /var/lib/apt/lists (<mirror>_dists_<suite>_..._Packages); no host named
INDEX = "MIRROR_debian_dists_bookworm_main_binary-amd64_Packages.lz4"


def test_lists_mtime_prefers_the_success_stamp(tmp_path: Path) -> None:
    lists, stamp = tmp_path / "lists", tmp_path / "update-success-stamp"
    assert APTSTATE.lists_mtime(str(stamp), str(lists)) == 0.0  # never refreshed
    lists.mkdir()
    os.utime(lists, (1_000_000, 1_000_000))
    # a container image's lists, deleted after its build: a recent folder without an index is never refreshed
    assert APTSTATE.lists_mtime(str(stamp), str(lists)) == 0.0
    (lists / INDEX).write_text("")
    os.utime(lists, (1_000_000, 1_000_000))
    assert APTSTATE.lists_mtime(str(stamp), str(lists)) == 1_000_000
    stamp.write_text("")
    os.utime(stamp, (2_000_000, 2_000_000))
    assert APTSTATE.lists_mtime(str(stamp), str(lists)) == 2_000_000
    (lists / INDEX).unlink()
    assert APTSTATE.lists_mtime(str(stamp), str(lists)) == 0.0  # refreshed once, emptied since


def test_lists_age() -> None:
    assert APTSTATE.lists_age(5000.0, 0.0) is None
    assert APTSTATE.lists_age(5000.0, 1399.96) == 3600.0
    assert APTSTATE.lists_age(5000.0, 5010.0) == -10.0  # clock behind the files: fresh, as for apt


@pytest.fixture(scope="module")
def module() -> ModuleType:
    return deb_apt_state


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query")
@pytest.mark.parametrize("check_mode", [False, True])
def test_module_reads_this_machine(module: ModuleType, capsys: pytest.CaptureFixture[str], check_mode: bool) -> None:
    args = {"_ansible_check_mode": check_mode}
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["changed"] is False
    # dpkg itself is installed on any host that has dpkg-query, at the version dpkg-query reports for it
    assert result["versions"]["dpkg"] == UTILS.parse_dpkg_query(
        os.popen("dpkg-query -W -f '${Package}\\t${Architecture}\\t${Version}\\t${Status}\\n' dpkg").read()
    )["dpkg"]["version"]
    assert result["selections"]["dpkg"] in ("install", "hold")
    assert set(result["auto_installed"]) <= set(result["versions"])
    # the venv's Python cannot import apt: found only through a system Python, as deb_packages reports it
    assert result["python_apt"] is (result["python_apt_interpreter"] is not None)
    assert result["python_apt_interpreter"] in (None, *APTSTATE.APT_INTERPRETERS)
    mtime = APTSTATE.lists_mtime()
    if mtime:
        assert abs(result["apt_lists_age_s"] - (time.time() - mtime)) < 60
    else:
        assert result["apt_lists_age_s"] is None


@pytest.fixture(scope="module")
def refresh() -> ModuleType:
    return apt_lists_refresh


@pytest.mark.parametrize(
    ("mtime_ago", "rc", "ran", "code"),
    [
        (600.0, 0, False, 0),  # refreshed 10 minutes ago: left as they are
        (7200.0, 0, True, 0),  # two hours old: refreshed
        (None, 0, True, 0),  # no package index (an image's deleted lists): refreshed whatever the folder's age
        (None, 100, True, 1),  # apt-get update failed: the task fails with apt's message
    ],
)
def test_apt_lists_refresh_runs_apt_get_update_only_when_due(
    refresh: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    mtime_ago: float | None, rc: int, ran: bool, code: int,
) -> None:  # fmt: skip
    now = time.time()
    monkeypatch.setattr(refresh, "lists_mtime", lambda: 0.0 if mtime_ago is None else now - mtime_ago)
    calls: list[list[str]] = []

    def run_command(self: object, argv: list[str], **kwargs: object) -> tuple[int, str, str]:
        calls.append(argv)
        return rc, "", "E: Failed to fetch http://mirror/dists/bookworm/InRelease" if rc else ""

    monkeypatch.setattr(refresh.AnsibleModule, "run_command", run_command)
    with patch_module_args({"valid_time_s": 3600}), pytest.raises(SystemExit) as exc:
        refresh.main()
    assert exc.value.code == code
    result = json.loads(capsys.readouterr().out)
    assert calls == ([["apt-get", "update", "-q"]] if ran else [])
    assert result.get("changed", False) is False
    if code:
        assert "apt-get update failed (exit 100)" in result["msg"] and "Failed to fetch" in result["msg"]
    else:
        assert result["refreshed"] is ran
