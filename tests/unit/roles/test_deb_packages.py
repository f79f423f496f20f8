"""deb_packages: dpkg-query parsing (states, holds, foreign architectures, noise), package_facts shape, and the
module run against this machine's real dpkg database, in and out of check mode."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuprov.gpu.plugins.module_utils import aptstate, deb
from ansible_collections.gpuprov.gpu.plugins.modules import deb_packages

UTILS = deb

# What `dpkg-query -W -f '${Package}\t${Architecture}\t${Version}\t${Status}\n'` printed on a focal host with
# an HWE kernel held, a removed kernel's config left behind, i386 multiarch, a known-only package and a
# half-configured DKMS package (shapes from dpkg-query(1); versions from Ubuntu 20.04's archive).
FOCAL = (
    "linux-image-5.15.0-105-generic\tamd64\t5.15.0-105.115~20.04.1\thold ok installed\n"
    "linux-headers-5.15.0-105-generic\tamd64\t5.15.0-105.115~20.04.1\tinstall ok installed\n"
    "linux-generic-hwe-20.04\tamd64\t5.15.0.105.115~20.04.1\thold ok installed\n"
    "linux-image-5.4.0-190-generic\tamd64\t5.4.0-190.210\tdeinstall ok config-files\n"
    "linux-image-generic\tamd64\t\tunknown ok not-installed\n"
    "libc6\tamd64\t2.31-0ubuntu9.16\tinstall ok installed\n"
    "libc6\ti386\t2.31-0ubuntu9.16\tinstall ok installed\n"
    "tzdata\tall\t2024a-0ubuntu0.20.04\tinstall ok installed\n"
    "nvidia-dkms-535\tamd64\t535.183.01-0ubuntu1\tinstall reinstreq half-configured\n"
    "cuda-drivers\tamd64\t\thold ok not-installed\n"
    "dpkg-query: no packages found matching nosuch\n"
    "garbage without tabs\n"
    "broken\tamd64\t1.0\tinstall installed\n"
)


@pytest.fixture(scope="module")
def module() -> ModuleType:
    return deb_packages


def test_parse_states_selections_and_versions() -> None:
    packages = UTILS.parse_dpkg_query(FOCAL, "amd64")
    assert packages["linux-image-5.15.0-105-generic"] == {
        "version": "5.15.0-105.115~20.04.1", "architecture": "amd64", "status": "installed", "selection": "hold",
        "error": "ok",
    }
    assert packages["linux-headers-5.15.0-105-generic"]["selection"] == "install"
    assert packages["linux-image-5.4.0-190-generic"]["status"] == "config-files"
    assert packages["nvidia-dkms-535"]["status"] == "half-configured"
    assert packages["nvidia-dkms-535"]["error"] == "reinstreq"
    # a hold on a package that is not installed is state worth seeing; a package dpkg merely knows is not
    assert packages["cuda-drivers"] == {"version": "", "architecture": "amd64", "status": "not-installed",
                                        "selection": "hold", "error": "ok"}
    assert "linux-image-generic" not in packages
    assert "broken" not in packages  # a two-word status is not dpkg's format


def test_parse_keys_foreign_architectures_like_apt() -> None:
    packages = UTILS.parse_dpkg_query(FOCAL, "amd64")
    assert packages["libc6"]["architecture"] == "amd64"
    assert packages["libc6:i386"]["architecture"] == "i386"
    assert packages["tzdata"]["architecture"] == "all"
    # without the native architecture the last line of a name wins and nothing is qualified
    assert "libc6:i386" not in UTILS.parse_dpkg_query(FOCAL)


def test_parse_skips_everything_but_package_lines() -> None:
    assert UTILS.parse_dpkg_query("") == {}
    assert UTILS.parse_dpkg_query("dpkg-query: no packages found matching linux-image-*\n") == {}


def test_missing_names_are_plain_names_not_installed() -> None:
    packages = UTILS.parse_dpkg_query(FOCAL, "amd64")
    names = ["linux-generic-hwe-20.04", "linux-image-*", "linux-image-5.4.0-190-generic", "python3-apt",
             "cuda-drivers", "linux-headers-[0-9]*"]
    assert UTILS.missing_names(names, packages) == ["linux-image-5.4.0-190-generic", "python3-apt", "cuda-drivers"]


def test_package_facts_shape_lists_installed_packages_per_bare_name() -> None:
    facts = UTILS.as_package_facts(UTILS.parse_dpkg_query(FOCAL, "amd64"))
    assert facts["libc6"] == [
        {"name": "libc6", "version": "2.31-0ubuntu9.16", "arch": "amd64", "source": "dpkg"},
        {"name": "libc6", "version": "2.31-0ubuntu9.16", "arch": "i386", "source": "dpkg"},
    ]
    assert facts["linux-generic-hwe-20.04"][0]["version"] == "5.15.0.105.115~20.04.1"
    for absent in ("linux-image-5.4.0-190-generic", "nvidia-dkms-535", "cuda-drivers"):
        assert absent not in facts


def test_argv_passes_the_format_for_dpkg_to_expand() -> None:
    argv = UTILS.dpkg_query_argv("/usr/bin/dpkg-query", ["linux-image-*"])
    assert argv == ["/usr/bin/dpkg-query", "-W", "-f", r"${Package}\t${Architecture}\t${Version}\t${Status}\n",
                    "linux-image-*"]


def _run(module: ModuleType, args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        module.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert exited.value.code == (1 if result.get("failed") else 0)
    return result


needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian-family machine")


def _dpkg_version(name: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f", "${Version}", name], capture_output=True, text=True,
                          check=True).stdout


@needs_dpkg
@pytest.mark.parametrize("check_mode", [False, True])
def test_module_reads_the_real_dpkg_database(module: ModuleType, capsys: pytest.CaptureFixture[str],
                                             check_mode: bool) -> None:
    result = _run(module, {"names": ["dpkg", "libc6", "gpuprov-no-such-package", "linux-image-*"],
                           "_ansible_check_mode": check_mode, "package_facts": True}, capsys)
    assert result["changed"] is False
    assert result["packages"]["dpkg"]["version"] == _dpkg_version("dpkg")
    assert result["packages"]["dpkg"]["status"] == "installed"
    assert result["missing"] == ["gpuprov-no-such-package"]
    assert result["native_architecture"] == subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                                                           text=True, check=True).stdout.strip()
    assert result["ansible_facts"]["packages"]["libc6"][0]["version"] == _dpkg_version("libc6")
    assert set(result["installed"]) <= set(result["packages"])
    # the shape deb_apt_state and host_state return, for the apt_pending / not_held filters
    assert result["versions"] == {k: v["version"] for k, v in result["packages"].items() if v["status"] == "installed"}
    assert result["selections"] == {k: v["selection"] for k, v in result["packages"].items()}
    assert set(result["auto_installed"]) <= set(result["versions"])


@needs_dpkg
def test_module_reports_python_apt_as_apt_would_find_it(module: ModuleType, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # This interpreter (the venv) cannot import apt; the answer is whatever the system Pythons can.
    probe = subprocess.run([sys.executable, "-c", "import apt, apt_pkg"], capture_output=True, check=False)
    assert probe.returncode != 0
    expected = next((p for p in aptstate.APT_INTERPRETERS if shutil.which(p) and subprocess.run(
        [p, "-c", "import apt"], capture_output=True, check=False).returncode == 0), None)
    result = _run(module, {"names": ["dpkg"]}, capsys)
    assert result["python_apt"] is (expected is not None)
    assert result["python_apt_interpreter"] == expected
    # nowhere to find it: reported as missing, no failure
    monkeypatch.setattr(aptstate, "APT_INTERPRETERS", ["/nonexistent/python3"])
    result = _run(module, {"names": ["dpkg"]}, capsys)
    assert result["python_apt"] is False
    assert result["python_apt_interpreter"] is None
    assert "ansible_facts" not in result


def test_python_apt_probe_does_not_start_this_interpreter_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # this interpreter cannot import apt (the venv); a subprocess of the same interpreter could not either
    if subprocess.run([sys.executable, "-c", "import apt, apt_pkg"], capture_output=True, check=False).returncode == 0:
        pytest.skip("this interpreter imports python3-apt")
    probed: list[list[str]] = []
    monkeypatch.setattr(aptstate, "APT_INTERPRETERS", [sys.executable, "/nonexistent/python3"])
    monkeypatch.setattr(aptstate, "probe_interpreters_for_module", lambda paths, name: probed.append(paths))
    aptstate.python_apt_interpreter()
    assert probed == [["/nonexistent/python3"]]


def test_module_fails_without_dpkg(module: ModuleType, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    result = _run(module, {}, capsys)
    assert result["failed"] is True
    assert "dpkg-query not found" in result["msg"]
