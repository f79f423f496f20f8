"""Which driver methods `gpuprov validate` lets through: all four the schema names (cuda-repo, distro, ubuntu-drivers,
runfile), each carried out by the nvidia_driver role, and the docs name the same four; ubuntu-drivers only on Ubuntu.
Method runfile's own fields (URL, SHA-256, version) are checked here too."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet import Fleet, checks
from gpuprov.fleet.loader import load_text
from gpuprov.fleet.validate import validate_loaded
from gpuprov.matrix import INSTALL_METHODS
from gpuprov.rolevars import with_role_variables

SHA = "a" * 64


def _validate(os_name: str, driver: str, gpus: str = "{model: L40S, count: 4}") -> Fleet:
    text = (f"version: 1\nsettings:\n  os: {os_name}\n  gpus: {gpus}\n"
            f"  driver: {driver}\nhosts:\n  gpu01: {{address: 10.0.0.11}}\n")
    return validate_loaded(load_text(text, "m.yml"), Path("m.yml"))


def _problems(driver: str, os_name: str = "ubuntu2204", gpus: str = "{model: L40S, count: 4}") -> dict[str, str]:
    with pytest.raises(FleetValidationError) as info:
        _validate(os_name, driver, gpus)
    return {p.path: str(p) for p in info.value.problems}


def test_docs_name_the_methods_validate_accepts() -> None:
    """The fleet-file reference's driver.method row names exactly the methods the schema (and validate) accepts."""
    root = Path(__file__).resolve().parents[3]
    row = next(line for line in (root / "docs/fleet-file.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `driver.method` |"))
    named = {m for m in ("cuda-repo", "distro", "ubuntu-drivers", "runfile", "autoinstall") if f"`{m}`" in row}
    assert named == set(INSTALL_METHODS)
    assert "not implemented" not in row


def test_distro_on_debian12_at_debians_branch_validates() -> None:
    fleet = _validate("debian12", '{method: distro, branch: "535"}')
    settings = fleet.hosts["gpu01"].settings
    assert settings["driver"]["method"] == "distro" and settings["driver"]["branch"] == "535"


@pytest.mark.parametrize("os_name", ["ubuntu2204", "ubuntu2404"])
def test_ubuntu_drivers_with_580_server_validates_and_reaches_the_role(os_name: str) -> None:
    fleet = _validate(os_name, '{method: ubuntu-drivers, branch: "580", flavour: proprietary}')
    drv = fleet.hosts["gpu01"].settings["driver"]
    # the role installs Ubuntu's -server build of the flavour: nvidia:580-server
    assert (drv["method"], drv["branch"], drv["flavour"]) == ("ubuntu-drivers", "580", "proprietary")
    role = with_role_variables({"gpuprov_driver_method": "ubuntu-drivers", "gpuprov_driver_branch": "580"})
    assert role["nvidia_driver_method"] == "ubuntu-drivers" and role["nvidia_driver_branch"] == "580"


def test_ubuntu_drivers_535_past_end_of_life_validates_with_the_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "today", lambda: dt.date(2026, 12, 4))  # after R535's end of life (June 2026)
    fleet = _validate("ubuntu2204", '{method: ubuntu-drivers, branch: "535"}')
    assert fleet.hosts["gpu01"].settings["driver"]["branch"] == "535"
    [warning] = fleet.warnings
    assert warning.path == "settings.driver.branch"
    assert "driver branch 535 (long-term support branch) reached end of life in June 2026" in warning.problem


def test_ubuntu_drivers_off_ubuntu_is_refused() -> None:
    message = _problems('{method: ubuntu-drivers, branch: "580"}', os_name="debian12")["settings.driver.method"]
    assert "ubuntu-drivers exists only on Ubuntu, not on debian12" in message


def test_ubuntu_drivers_on_an_nvswitch_system_is_refused_for_fabric_manager() -> None:
    problems = _problems('{method: ubuntu-drivers, branch: "580"}',
                         gpus="{model: H100-SXM5-80GB, count: 8, nvswitch: true}")
    assert "method ubuntu-drivers cannot install" in problems["settings.driver.method"]


@pytest.mark.parametrize("url", [
    "https://mirror.example.com/nvidia/NVIDIA-Linux-x86_64-580.105.08.run",
    "http://10.0.0.5:8080/driver.run",
    "file:///srv/nvidia/NVIDIA-Linux-x86_64-580.105.08.run",
])
def test_runfile_validates_and_reaches_the_role(url: str) -> None:
    fleet = _validate("ubuntu2204", f'{{method: runfile, version: "580.105.08", runfile_url: "{url}", '
                                    f"runfile_sha256: {SHA.upper()}, replace_packaged: true}}")
    drv = fleet.hosts["gpu01"].settings["driver"]
    assert drv["branch"] == "580" and drv["runfile_sha256"] == SHA
    role = with_role_variables({"gpuprov_driver_runfile_url": url, "gpuprov_driver_runfile_sha256": SHA,
                                "gpuprov_driver_replace_packaged": True, "gpuprov_driver_version": "580.105.08"})
    assert role["nvidia_driver_runfile_url"] == url and role["nvidia_driver_runfile_sha256"] == SHA
    assert role["nvidia_driver_replace_packaged"] is True and role["nvidia_driver_package_version"] == "580.105.08"


def test_runfile_url_from_the_environment_validates() -> None:
    fleet = _validate("ubuntu2204", '{method: runfile, version: "580.105.08", runfile_url: {env: RUNFILE_URL}, '
                                    f"runfile_sha256: {SHA}}}")
    assert fleet.hosts["gpu01"].settings["driver"]["method"] == "runfile"


@pytest.mark.parametrize(("url", "words"), [
    ("ftp://mirror.example.com/d.run", "not an http(s) or file URL"),
    ("https://user:secret@mirror.example.com/d.run", "credentials"),
    ("file://server/share/d.run", "absolute path"),
    ("$RUNFILE_URL", "does not expand"),
    ("https://secret@mirror.example.com/d.run", "credentials"),  # a token alone as the user
    ("https://mirror.example.com/d.run?access_token=secret", "query carries a credential (access_token"),
    ("https://mirror.example.com/d.run?X-Amz-Credential=secret&X-Amz-Signature=secret", "X-Amz-Signature"),
    ("https://mirror.example.com/d.run?sv=2024&sig=secret", "query carries a credential (sig;"),
])
def test_bad_runfile_url_names_the_field_and_hides_the_value(url: str, words: str) -> None:
    message = _problems(f'{{method: runfile, version: "580.105.08", runfile_url: "{url}", runfile_sha256: {SHA}}}')[
        "settings.driver.runfile_url"]
    assert words in message
    assert "secret" not in message and "server" not in message


def test_a_query_without_a_credential_is_kept() -> None:
    url = "https://mirror.example.com/d.run?channel=stable"
    fleet = _validate("ubuntu2204", f'{{method: runfile, version: "580.105.08", runfile_url: "{url}", '
                                    f"runfile_sha256: {SHA}}}")
    assert fleet.hosts["gpu01"].settings["driver"]["runfile_url"] == url


def test_runfile_sha256_must_be_64_hex_digits() -> None:
    problems = _problems('{method: runfile, version: "580.105.08", runfile_url: "https://m.example.com/d.run", '
                         "runfile_sha256: " + "g" * 64 + "}")
    assert "not a SHA-256 checksum" in problems["settings.driver.runfile_sha256"]


def test_runfile_needs_version_url_and_sha256() -> None:
    problems = _problems("{method: runfile}")
    for key in ("version", "runfile_url", "runfile_sha256"):
        assert f"driver method runfile needs driver.{key}" in problems[f"settings.driver.{key}"]


def test_runfile_version_must_match_the_branch() -> None:
    problems = _problems('{method: runfile, branch: "570", version: "580.105.08", '
                         f'runfile_url: "https://m.example.com/d.run", runfile_sha256: {SHA}}}')
    assert "driver version 580.105.08 is not on branch 570" in problems["settings.driver.version"]


def test_runfile_name_must_match_the_version() -> None:
    problems = _problems('{method: runfile, version: "580.95.05", runfile_url: '
                         f'"https://m.example.com/NVIDIA-Linux-x86_64-580.105.08.run", runfile_sha256: {SHA}}}')
    message = problems["settings.driver.runfile_url"]
    assert "names driver 580.105.08, but driver.version is 580.95.05" in message


def test_runfile_on_an_nvswitch_system_is_refused_for_fabric_manager() -> None:
    problems = _problems('{method: runfile, version: "580.105.08", runfile_url: "https://m.example.com/d.run", '
                         f"runfile_sha256: {SHA}}}", gpus="{model: H100-SXM5-80GB, count: 8, nvswitch: true}")
    assert "method runfile cannot install" in problems["settings.driver.method"]
