"""build_library() and install(): soname, exported symbols, the file-system layout lab containers get."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from gpuprov.exceptions import ConfigError
from gpuprov.lab.mocknvml import compile_profile, driver_overlay, install, list_profiles


def test_soname_and_hidden_internals(mock_library: Path) -> None:
    if shutil.which("readelf") is None:
        pytest.skip("readelf not installed")
    dynamic = subprocess.run(["readelf", "-d", str(mock_library)], capture_output=True, text=True, check=True)
    assert "Library soname: [libnvidia-ml.so.1]" in dynamic.stdout
    symbols = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(mock_library)], capture_output=True, text=True, check=True
    ).stdout
    exported = {line.split()[-1] for line in symbols.splitlines() if " GLOBAL " in line and " UND " not in line}
    assert "nvmlInternalGetExportTable" in exported
    assert all(name.startswith("nvml") for name in exported), sorted(n for n in exported if not n.startswith("nvml"))


def test_install_layout(tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    done = install(tmp_path, "xid79")
    assert done.library == tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    assert done.symlink.is_symlink() and done.symlink.resolve() == done.library.resolve()
    assert done.conf == tmp_path / "etc/gpuprov/mock-nvml.conf"
    assert "profile=xid79" in done.conf.read_text(encoding="utf-8")
    assert sorted(p.stem for p in done.profile_dir.glob("*.conf")) == list_profiles()
    install(tmp_path, "h200x2")  # idempotent over an existing install
    assert "profile=h200x2" in done.conf.read_text(encoding="utf-8")


def test_profile_selected_by_name(
    use_profile: Callable[[str], ModuleType], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = use_profile("h200x2")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "rtx3090x4.conf").write_text(compile_profile("rtx3090x4"), encoding="utf-8")
    monkeypatch.delenv("GPUPROV_MOCK_NVML_CONF")
    monkeypatch.setenv("GPUPROV_MOCK_NVML_PROFILE", "rtx3090x4")
    monkeypatch.setenv("GPUPROV_MOCK_NVML_PROFILE_DIR", str(tmp_path / "d"))
    n.nvmlInit()
    assert n.nvmlDeviceGetCount() == 4
    n.nvmlShutdown()
    monkeypatch.setenv("GPUPROV_MOCK_NVML_PROFILE", "missing")
    with pytest.raises(n.NVMLError_DriverNotLoaded):  # no profile: behaves as a host without a driver
        n.nvmlInit()


def test_driver_overlay_wins_while_it_exists(use_profile: Callable[[str], ModuleType], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile naming an overlay reports the overlay's driver, NVML and CUDA versions while the file exists
    (the lab's stand-in driver package ships it) and its own once the file is gone, re-read at each nvmlInit."""
    overlay = tmp_path / "driver.conf"
    conf = tmp_path / "with-overlay.conf"
    conf.write_text(compile_profile("a100x8-nvswitch") + f"overlay={overlay}\n", encoding="utf-8")
    pynvml = use_profile("a100x8-nvswitch")
    monkeypatch.setenv("GPUPROV_MOCK_NVML_CONF", str(conf))
    pynvml.nvmlInit()
    assert pynvml.nvmlSystemGetDriverVersion() == "535.183.01"  # no overlay file yet: the profile's
    pynvml.nvmlShutdown()
    overlay.write_text(driver_overlay("570.133.20"), encoding="utf-8")
    pynvml.nvmlInit()
    assert pynvml.nvmlSystemGetDriverVersion() == "570.133.20"
    assert pynvml.nvmlSystemGetNVMLVersion() == "12.570.133.20"
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 12080
    assert pynvml.nvmlDeviceGetCount() == 8  # everything else is still the profile's
    pynvml.nvmlShutdown()
    overlay.unlink()
    pynvml.nvmlInit()
    assert pynvml.nvmlSystemGetDriverVersion() == "535.183.01"


def test_driver_overlay_follows_the_matrix() -> None:
    assert "system.cuda_driver_version=13000" in driver_overlay("580.65.06")
    assert "system.nvml_version=12.550.127.05" in driver_overlay("550.127.05")
    with pytest.raises(ConfigError, match="no CUDA release"):
        driver_overlay("100.1")
