"""The mig role's engine (the collection's plugins/module_utils/mig.py) against the mock NVML, in this process:
assert-then-apply, idempotence, refusal on GPUs without MIG (v100x4), a held GPU, and a reboot
(instances gone, MIG mode kept) followed by a re-apply. No containers: fast, and the same engine the
mig_layout module and gpuprov-mig.service run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml
import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import cdi, miglayout
from ansible_collections.gpuprov.gpu.plugins.module_utils import mig as mig_engine

from gpuprov.lab.mocknvml import bind_pynvml, build_library, compile_profile
from gpuprov.lab.standin.container import ctk_stub

ROOT = Path(__file__).resolve().parents[2]
ALL_1G = [{"devices": "all", "mig_enabled": True, "mig_devices": {"1g.10gb": 7}}]


mig: ModuleType = mig_engine


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the mock NVML")
    lib = build_library(tmp_path_factory.mktemp("mig-lib"))
    bind_pynvml(lib)
    return lib


@pytest.fixture
def gpu_host(library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Path]]:
    """Select a profile (its state file lands beside the conf) and a boot id; return the state path."""
    monkeypatch.setenv("GPUPROV_MOCK_NVML_BOOT_ID", "boot-1")
    monkeypatch.delenv("GPUPROV_MOCK_NVML_STATE", raising=False)

    def select(profile: str) -> Path:
        conf = tmp_path / "mock-nvml.conf"
        conf.write_text(compile_profile(profile), encoding="utf-8")
        monkeypatch.setenv("GPUPROV_MOCK_NVML_CONF", str(conf))
        return tmp_path / "mock-nvml.state"

    yield select
    while True:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            break


def _instances(result: dict[str, Any]) -> list[dict[str, int]]:
    return [gpu.get("after", gpu["instances"]) for gpu in result["gpus"]]


def test_apply_then_assert_is_idempotent(gpu_host: Callable[[str], Path]) -> None:
    state = gpu_host("a100x8-nvswitch")
    plan = mig.run(pynvml, ALL_1G, apply=False)
    assert plan["changed"] is True
    assert plan["mode_change"] is True
    assert {gpu["state"] for gpu in plan["gpus"]} == {"MIG mode off"}
    assert not state.exists()  # planning changes nothing
    applied = mig.run(pynvml, ALL_1G, apply=True)
    assert applied["reboot_required"] is False
    assert _instances(applied) == [{"1g.10gb": 7}] * 8
    again = mig.run(pynvml, ALL_1G, apply=True)
    assert again["changed"] is False
    assert [gpu["actions"] for gpu in again["gpus"]] == [[]] * 8
    assert {gpu["state"] for gpu in again["gpus"]} == {"ok"}


def test_reboot_loses_instances_keeps_mode_and_reapply_restores(
    gpu_host: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu_host("a100x8-nvswitch")
    mig.run(pynvml, ALL_1G, apply=True)
    monkeypatch.setenv("GPUPROV_MOCK_NVML_BOOT_ID", "boot-2")  # the host rebooted
    after_boot = mig.run(pynvml, ALL_1G, apply=False)
    assert [(g["mig_current"], g["instances"], g["state"]) for g in after_boot["gpus"]] == [
        (True, {}, "MIG on but no instances")
    ] * 8
    assert after_boot["mode_change"] is False
    reapplied = mig.run(pynvml, ALL_1G, apply=True)
    assert _instances(reapplied) == [{"1g.10gb": 7}] * 8
    assert mig.run(pynvml, ALL_1G, apply=False)["changed"] is False


def test_layout_mixing_profiles_and_gpus(gpu_host: Callable[[str], Path]) -> None:
    gpu_host("a100x8-40gb")
    layout = [
        {"devices": "all", "mig_enabled": True, "mig_devices": {"1g.5gb": 7}},
        {"devices": [1], "mig_enabled": True, "mig_devices": {"1g.5gb": 1, "4g.20gb": 1, "2g.10gb": 1}},
        {"devices": [2], "mig_enabled": True, "mig_devices": {"3g.20gb": 2}},
        {"devices": [3], "mig_enabled": False},
    ]
    result = mig.run(pynvml, layout, apply=True)
    got = _instances(result)
    assert got[0] == {"1g.5gb": 7}
    assert got[1] == {"1g.5gb": 1, "2g.10gb": 1, "4g.20gb": 1}
    assert got[2] == {"3g.20gb": 2}
    assert got[3] == {}
    assert result["gpus"][3]["actions"] == []  # already off: nothing to do
    changed = [{"devices": [2], "mig_enabled": True, "mig_devices": {"7g.40gb": 1}}]
    plan = mig.run(pynvml, changed, apply=False)
    assert plan["gpus"][0]["state"] == "instances differ from the declared layout"
    assert plan["gpus"][0]["actions"] == ["destroy instances {'3g.20gb': 2}", "create instances {'7g.40gb': 1}"]


def test_refuses_gpus_without_mig(gpu_host: Callable[[str], Path]) -> None:
    gpu_host("v100x4")
    with pytest.raises(mig.MigError, match=r"GPU 0 \(Tesla V100-SXM2-32GB, .*\) is not MIG-capable"):
        mig.run(pynvml, ALL_1G, apply=False)
    # disabling MIG on them is a no-op, not an error
    assert mig.run(pynvml, [{"devices": "all", "mig_enabled": False}], apply=True)["changed"] is False


def test_unknown_profile_names_what_the_gpu_offers(gpu_host: Callable[[str], Path]) -> None:
    gpu_host("a100x8-nvswitch")
    with pytest.raises(mig.MigError, match=r"no MIG profile 1g\.5gb; it offers 1g\.10gb, "):
        mig.run(pynvml, [{"devices": [0], "mig_devices": {"1g.5gb": 7}}], apply=True)


def test_layout_that_does_not_fit_fails_clearly(gpu_host: Callable[[str], Path]) -> None:
    gpu_host("a100x8-nvswitch")
    with pytest.raises(mig.MigError, match=r"creating 1g\.10gb failed: NVML_ERROR_INSUFFICIENT_RESOURCES"):
        mig.run(pynvml, [{"devices": [0], "mig_devices": {"4g.40gb": 1, "1g.10gb": 4}}], apply=True)


def test_held_gpu_blocks_the_mode_change_with_the_holder_named(
    gpu_host: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu_host("a100x8-nvswitch")
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").write_text("", encoding="utf-8")
    monkeypatch.setenv("GPUPROV_MOCK_NVML_DEV_DIR", str(dev))
    with (dev / "nvidia0").open(encoding="utf-8") as handle:
        holder = subprocess.Popen(["sleep", "30"], stdin=handle)
    try:
        # the mock leaves the change pending while something holds the GPU, as NVML does
        pynvml.nvmlInit()
        handle0 = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceSetMigMode(handle0, 1) == pynvml.NVML_ERROR_IN_USE
        assert pynvml.nvmlDeviceGetMigMode(handle0) == [0, 1]
        pynvml.nvmlShutdown()
    finally:
        holder.kill()
        holder.wait()


def test_holders_name_nvidia_drm_and_processes(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (dev / name).write_text("", encoding="utf-8")
    proc = tmp_path / "proc"
    (proc / "4242" / "fd").mkdir(parents=True)
    (proc / "4242" / "fd" / "3").symlink_to(dev / "nvidia1")
    (proc / "4242" / "comm").write_text("python3\n", encoding="utf-8")
    (proc / "77" / "fd").mkdir(parents=True)
    (proc / "77" / "fd" / "0").symlink_to(dev / "nvidiactl")
    assert mig.holders(1, str(proc), str(dev)) == ["pid 4242 (python3)"]
    assert mig.holders(0, str(proc), str(dev)) == []
    (proc / "modules").write_text("nvidia_drm 126976 4 - Live 0x0\nnvidia 1 2 - Live 0\n", encoding="utf-8")
    assert mig.holders(0, str(proc), str(dev)) == ["nvidia_drm kernel module (modeset)"]


def test_mode_change_refused_while_nvidia_drm_is_loaded(gpu_host: Callable[[str], Path], tmp_path: Path) -> None:
    gpu_host("a100x8-nvswitch")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "modules").write_text("nvidia_drm 126976 4 - Live 0x0\n", encoding="utf-8")
    with pytest.raises(mig.MigError, match=r"GPU 0 \(GPU-[0-9a-f-]+\): cannot change MIG mode while the GPU is "
                       r"held by nvidia_drm kernel module \(modeset\)"):
        mig.run(pynvml, ALL_1G, apply=True, proc_root=str(proc))


def test_one_held_gpu_leaves_every_gpu_unchanged(gpu_host: Callable[[str], Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU 3 of eight is held: the layout is refused before GPUs 0-2 are re-partitioned, naming GPU 3."""
    gpu_host("a100x8-nvswitch")
    real = mig.holders
    monkeypatch.setattr(mig, "holders", lambda minor, proc_root="/proc", dev_dir="/dev": (
        ["pid 4242 (python3)"] if minor == 3 else real(minor, str(tmp_path), dev_dir)))
    with pytest.raises(mig.MigError, match=r"^no GPU was changed: GPU 3 \(GPU-[0-9a-f-]+\): cannot change MIG mode "
                       r"while the GPU is held by pid 4242 \(python3\)"):
        mig.run(pynvml, ALL_1G, apply=True, proc_root=str(tmp_path))
    after = mig.run(pynvml, ALL_1G, apply=False, proc_root=str(tmp_path))
    assert [g["mig_current"] for g in after["gpus"]] == [False] * 8
    assert _instances(after) == [{}] * 8
    monkeypatch.setattr(mig, "holders", real)
    applied = mig.run(pynvml, ALL_1G, apply=True, proc_root=str(tmp_path))
    assert [g["after"] for g in applied["gpus"]] == [{"1g.10gb": 7}] * 8


def test_plan_reports_the_creation_order_the_engine_uses(gpu_host: Callable[[str], Path]) -> None:
    """The boot unit's nvidia-smi list is the plan's ``create``; the engine creates the same, largest first."""
    gpu_host("a100x8-nvswitch")
    layout = [{"devices": [0], "mig_devices": {"1g.10gb": 2, "3g.40gb": 1, "2g.20gb": 1}}]
    plan = mig.run(pynvml, layout, apply=False)
    assert plan["gpus"][0]["create"] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    applied = mig.run(pynvml, layout, apply=True)
    assert applied["gpus"][0]["after"] == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def test_balanced_layout_fits(gpu_host: Callable[[str], Path]) -> None:
    # mig-parted's "all-balanced" for the A100-40GB: 2x 1g.5gb + 2g.10gb + 3g.20gb fill the GPU exactly
    gpu_host("a100x8-40gb")
    layout = [{"devices": [0], "mig_devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}]
    assert _instances(mig.run(pynvml, layout, apply=True)) == [{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}]


def test_cdi_spec_lists_the_gpus_and_is_stale_after_a_layout_change(
    gpu_host: Callable[[str], Path], library: Path, tmp_path: Path
) -> None:
    """The stand-in nvidia-ctk generates the CDI specification from the same mock NVML; the cdi_spec module's
    comparison finds it current, then stale once a MIG layout is applied, and current again after regenerating."""
    gpu_host("a100x8-nvswitch")
    ctk = tmp_path / "nvidia-ctk"
    ctk.write_text(ctk_stub("1.17.8-1"), encoding="utf-8")
    ctk.chmod(0o755)
    spec_dir = tmp_path / "cdi"
    env = dict(os.environ, LD_LIBRARY_PATH=str(library.parent))

    def generate_and_list() -> list[str]:
        generate = ["cdi", "generate", f"--output={spec_dir}/nvidia.yaml"]
        for argv in (generate, ["cdi", "list", f"--spec-dir={spec_dir}"]):
            done = subprocess.run([sys.executable, str(ctk), *argv], env=env, capture_output=True, text=True,
                                  check=False, timeout=60)
            assert done.returncode == 0, done.stderr
        return cdi.parse_cdi_list(done.stdout)

    def now() -> dict[str, Any]:
        state = cdi.nvml_state(pynvml)
        names = cdi.expected_names(state["gpus"])
        return {"driver_version": state["driver_version"], "toolkit_version": "1.17.8", "devices": names,
                "fingerprint": cdi.fingerprint(state["driver_version"], "1.17.8", names)}

    listed = generate_and_list()
    before = now()
    assert before["driver_version"] == "535.183.01"
    assert len(listed) == 17  # 8 GPUs by index and by UUID, and all
    assert {"0", "7", "GPU-00000000-0000-4000-8000-0000000a1000", "all"} <= set(listed)
    assert cdi.stale_reason(before, listed, dict(before)) == ""
    mig.run(pynvml, [{"devices": [0, 1], "mig_enabled": True, "mig_devices": {"3g.40gb": 1, "1g.10gb": 2}}],
            apply=True, proc_root=str(tmp_path))
    after = now()
    assert cdi.stale_reason(after, listed, dict(before)) == (
        "the specification's devices differ from NVML's (missing: 0:0, 0:1, 0:2, 1:0, 1:1, 1:2; "
        "no longer present: none)")
    relisted = generate_and_list()
    assert {"0:0", "0:1", "0:2", "1:0", "1:1", "1:2"} <= set(relisted)
    assert cdi.stale_reason(after, relisted, dict(after)) == ""


@pytest.mark.lab
def test_real_nvidia_smi_lists_the_applied_layout(
    gpu_host: Callable[[str], Path], library: Path, tmp_path: Path
) -> None:
    """Debian's nvidia-smi 535 reads the same GPU state (what `nvidia-smi mig -lgi` shows an operator)."""
    from gpuprov.exceptions import EnvironmentMissing
    from gpuprov.lab.mocknvml.smi import fetch_nvidia_smi

    try:
        smi = fetch_nvidia_smi()
    except EnvironmentMissing as exc:
        pytest.skip(f"real nvidia-smi unavailable: {exc}")
    gpu_host("a100x8-nvswitch")
    mig.run(pynvml, [{"devices": [1], "mig_devices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}], apply=True,
            proc_root=str(tmp_path))
    env = dict(os.environ, LD_LIBRARY_PATH=str(library.parent))
    listing = subprocess.run([str(smi), "mig", "-lgi"], env=env, capture_output=True, text=True, check=False,
                             timeout=60)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    rows = sorted(" ".join(line.strip("| ").split()[:3]) for line in listing.stdout.splitlines() if " MIG " in line)
    assert rows == ["1 MIG 1g.10gb", "1 MIG 1g.10gb", "1 MIG 2g.20gb", "1 MIG 3g.40gb"]
    # what verify's mig step, doctor and check's drift report read from the same listing
    parsed = miglayout.parse_mig_instances(listing.stdout)
    assert parsed == {1: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}
    fields = "--query-gpu=mig.mode.current,mig.mode.pending"
    query = subprocess.run([str(smi), "-i", "1", fields, "--format=csv,noheader"], env=env, capture_output=True,
                           text=True, check=False, timeout=60)
    assert query.stdout.strip() == "Enabled, Enabled"
