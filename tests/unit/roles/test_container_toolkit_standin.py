"""The stand-in toolkit packages (gpuprov/lab/standin/container.py) reproduce the failure signatures the
container_toolkit tests rely on: the cgroup v2 error below libnvidia-container 1.8.0 and the
library-load error when the driver root lacks libnvidia-ml.so.1. The stub runs here, on the controller,
against fixture directories."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import tomlkit

from gpuprov.lab.standin.container import CONFIG_TOML, DEFAULT_CONFIG, VERSIONS, packages, toolkit_packages

pytestmark = pytest.mark.skipif(shutil.which("dpkg") is None, reason="the stub compares versions with dpkg")


def stub(tmp_path: Path, version: str) -> Path:
    (spec,) = [s for s in toolkit_packages(version) if s.name == "libnvidia-container-tools"]
    cli = tmp_path / f"nvidia-container-cli-{version}"
    cli.write_text(spec.files["/usr/bin/nvidia-container-cli"].content, encoding="utf-8")
    cli.chmod(0o755)
    return cli


def fixture_roots(tmp_path: Path) -> tuple[Path, Path, Path]:
    unified = tmp_path / "cgroup-v2"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("cpuset cpu io memory pids\n", encoding="utf-8")
    driver = tmp_path / "driver"
    (driver / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (driver / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").write_bytes(b"\x7fELF")
    empty = tmp_path / "run-nvidia-driver"
    empty.mkdir()
    return unified, driver, empty


def run(cli: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cli), *args, "info"], capture_output=True, text=True, check=False, timeout=30)


def test_stub_fails_on_unified_cgroup_below_floor(tmp_path: Path) -> None:
    unified, driver, _ = fixture_roots(tmp_path)
    old = run(stub(tmp_path, "1.3.2-1"), "--cgroup-root", str(unified), "--root", str(driver))
    assert old.returncode == 1
    assert "cgroup subsystem devices not found" in old.stderr
    new = run(stub(tmp_path, "1.17.8-1"), "--cgroup-root", str(unified), "--root", str(driver))
    assert new.returncode == 0, new.stderr
    # with a v1 devices controller present, the old library works
    (unified / "devices").mkdir()
    assert run(stub(tmp_path, "1.3.2-1"), "--cgroup-root", str(unified), "--root", str(driver)).returncode == 0


def test_stub_fails_without_nvml_under_root(tmp_path: Path) -> None:
    _, driver, empty = fixture_roots(tmp_path)
    cli = stub(tmp_path, "1.17.8-1")
    bad = run(cli, "--cgroup-root", str(tmp_path / "none"), "--root", str(empty))
    assert bad.returncode == 1
    assert "load library failed: libnvidia-ml.so.1" in bad.stderr
    good = run(cli, "--cgroup-root", str(tmp_path / "none"), "--root", str(driver))
    assert good.returncode == 0, good.stderr
    assert "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in good.stdout


def test_packages_are_version_locked_and_ship_the_config() -> None:
    specs = packages()
    assert {(s.name, s.version) for s in specs} == {
        (name, v) for v in VERSIONS for name in ("libnvidia-container1", "libnvidia-container-tools",
                                                 "nvidia-container-toolkit-base", "nvidia-container-toolkit")}
    for spec in specs:
        for dep in spec.depends:
            assert dep.endswith(f"(= {spec.version})")
    (base,) = [s for s in toolkit_packages(VERSIONS[-1]) if s.name == "nvidia-container-toolkit-base"]
    # the config is created by postinst only where absent (not a conffile dpkg would replace)
    assert "/etc/nvidia-container-runtime/config.toml" not in base.files
    assert base.files[DEFAULT_CONFIG].content == CONFIG_TOML
    assert "[ ! -e /etc/nvidia-container-runtime/config.toml ]" in base.scripts["postinst"]
    assert "/usr/bin/nvidia-container-runtime" in base.files
    doc = tomlkit.parse(CONFIG_TOML)
    assert "root" not in doc["nvidia-container-cli"]  # commented out, as the real package ships it
