"""gpuprov doctor: the rules on facts collected from the real mock NVML (one subprocess per profile, loading
libnvidia-ml.so.1 built from gpuprov/lab/mocknvml) plus fixture sysfs/procfs/kernel-log trees, and the pure rules
(utilisation swings, throttling, stale holders) on hand-made facts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import doctor as rules
from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_workload import swinging

from gpuprov import doctor, holders
from tests.bios_check_fixtures import (
    A100X8_BUS,
    GIB,
    H200X2_BUS,
    LOG_RMINIT,
    LOG_XID79,
    Gpu,
    Tree,
    build_tree,
    healthy_h200,
)

ROOT = Path(__file__).resolve().parents[2]
MIXED_BUS = ["0000:01:00.0", "0000:07:00.0", "0000:47:00.0", "0000:81:00.0", "0000:c2:00.0"]
KERNEL = "6.1.0-28-amd64"
SCRIPT = (
    "import json, sys; from gpuprov.doctor import local_facts; "
    "print(json.dumps(local_facts(0, 1, sys.argv[1] + '/sys', sys.argv[1] + '/proc', sys.argv[1] + '/kernel.log', "
    f"{KERNEL!r})))"
)


def kernel(ok: bool = True, headers: bool = True, dkms_state: str = "installed") -> dict[str, Any]:
    """kernel_dkms_info's answer for the running kernel (the host's own dkms/modinfo are not under test here)."""
    module = {"dkms_version": "580.159.04", "dkms_state": dkms_state, "file": ok, "modinfo": ok,
              "modinfo_filename": f"/lib/modules/{KERNEL}/updates/dkms/nvidia.ko" if ok else "",
              "signer": "", "ok": ok}
    row = {"version": KERNEL, "running": True, "headers_present": headers, "headers_package": f"linux-headers-{KERNEL}",
           "modules": {"nvidia": module}}
    return {"running_kernel": KERNEL, "kernels": [row], "problems": []}


@pytest.fixture(scope="module")
def mock_lib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gpuprov.lab.mocknvml import build_library

    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the mock NVML")
    out = tmp_path_factory.mktemp("mocknvml")
    build_library(out)
    return out


def collect(lib_dir: Path, tmp_path: Path, profile: str, tree: Tree, **extra: Any) -> dict[str, Any]:
    """Run doctor's local collector on the mock NVML ``profile`` and the fixture ``tree`` in a subprocess."""
    from gpuprov.lab.mocknvml import mock_environment

    root = build_tree(tmp_path / "fixture", tree)
    env = mock_environment(lib_dir, profile, tmp_path / "conf")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / ".collections")])  # this checkout's collection
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(root)], env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    facts: dict[str, Any] = json.loads(proc.stdout)
    facts["kernel"] = kernel()
    facts.update(extra)
    return facts


def ids(diagnoses: list[dict[str, Any]]) -> list[str]:
    return [d["id"] for d in diagnoses]


def only(diagnoses: list[dict[str, Any]], did: str) -> dict[str, Any]:
    found = [d for d in diagnoses if d["id"] == did]
    assert found, f"{did} not in {ids(diagnoses)}"
    return found[0]


def a100_tree(**overrides: Any) -> Tree:
    """The a100x8-nvswitch profile's host: driver 535.183.01 loaded, Fabric Manager running."""
    tree = Tree(gpus=[Gpu(b, bar1_size=128 * GIB) for b in A100X8_BUS], module_version="535.183.01",
                daemons=["nvidia-persistenced", "nv-fabricmanager"])
    for key, value in overrides.items():
        setattr(tree, key, value)
    return tree


# -- healthy profiles and the real capture: no diagnosis ------------------------------------------------------


@pytest.mark.parametrize("profile", ["h200x2", "pcie-idle-downclock"])
def test_healthy_profiles_have_no_diagnosis(profile: str, mock_lib_dir: Path, tmp_path: Path) -> None:
    facts = collect(mock_lib_dir, tmp_path, profile, healthy_h200())
    assert facts["nvml"]["available"] and facts["samples"]["gpus"]["0"] == [0]
    assert doctor.diagnose(facts) == []


def test_heterogeneous_ordering_has_no_diagnosis(mock_lib_dir: Path, tmp_path: Path) -> None:
    tree = Tree(gpus=[Gpu(b, bar1_size=(256 if i == 0 else 128 * 1024) * 1024**2) for i, b in enumerate(MIXED_BUS)],
                module_version="535.183.01", daemons=["nv-fabricmanager"])
    facts = collect(mock_lib_dir, tmp_path, "heterogeneous-ordering", tree)
    assert facts["nvml"]["count"] == 5
    assert doctor.diagnose(facts) == []


def test_real_h200_capture_has_no_diagnosis(tmp_path: Path) -> None:
    nvml = json.loads((ROOT / "tests" / "data" / "real-h200" / "facts.json").read_text())
    root = build_tree(tmp_path, healthy_h200())
    platform = doctor._library("platform_info").collect(str(root / "sys"), str(root / "proc"), str(root / "kernel.log"))
    pci = doctor._library("gpu_pci_info").collect(str(root / "sys"), ["0x10de"], doctor.PCI_MODULES)
    facts = {"nvml": nvml, "platform": platform, "pci": pci, "kernel": kernel(), "holders": [], "nvml_pids": [],
             "samples": {"window_s": 10, "gpus": {"0": [0, 0, 0, 0, 0], "1": [0, 0, 0, 0, 0]}}}
    assert doctor.diagnose(facts) == []


# -- one test per fault profile -------------------------------------------------------------------------------


def test_pcie_downtrained(mock_lib_dir: Path, tmp_path: Path) -> None:
    found = doctor.diagnose(collect(mock_lib_dir, tmp_path, "pcie-downtrained", a100_tree()))
    d = only(found, "pcie_link_degraded")
    assert d["subject"] == "0000:47:00.0" and "reseat the card" in d["fix"] and not d["fixable"]


def test_pcie_link_the_fleet_declares_is_not_degraded(mock_lib_dir: Path, tmp_path: Path) -> None:
    """Doctor on a fleet host reads the link the fleet file declares (bios_check.pcie_width / pcie_gen, as the
    doctor play templates them: strings), as bios_check does; a link below the declared one is still degraded."""
    facts = collect(mock_lib_dir, tmp_path, "pcie-downtrained", a100_tree())
    declared = dict(facts, expected={"pcie_width": "4", "pcie_gen": "3"})
    assert "pcie_link_degraded" not in ids(doctor.diagnose(declared))
    wider = dict(facts, expected={"pcie_width": "8", "pcie_gen": "auto"})
    assert only(doctor.diagnose(wider), "pcie_link_degraded")["subject"] == "0000:47:00.0"


def test_above4g_off(mock_lib_dir: Path, tmp_path: Path) -> None:
    found = doctor.diagnose(collect(mock_lib_dir, tmp_path, "above4g-off", healthy_h200()))
    assert ids(found) == ["bar1_too_small", "bar1_too_small"]
    assert "enable Above 4G Decoding" in found[0]["fix"]


def test_no_devices(mock_lib_dir: Path, tmp_path: Path) -> None:
    tree = healthy_h200(gpus=[Gpu(b, bar1_size=0) for b in H200X2_BUS], kernel_log=LOG_RMINIT)
    found = doctor.diagnose(collect(mock_lib_dir, tmp_path, "no-devices", tree))
    assert "gpus_not_initialised" in ids(found) and "bar1_unassigned" in ids(found)
    assert "enable Above 4G Decoding" in only(found, "gpus_not_initialised")["fix"]
    assert "driver_not_loaded" not in ids(found)


def test_xid79(mock_lib_dir: Path, tmp_path: Path) -> None:
    buses = [b if i != 1 else "0000:3b:00.0" for i, b in enumerate(A100X8_BUS)]
    tree = a100_tree(gpus=[Gpu(b, bar1_size=128 * GIB) for b in buses], kernel_log=LOG_XID79, proc_gpus=buses)
    found = doctor.diagnose(collect(mock_lib_dir, tmp_path, "xid79", tree))
    assert ids(found) == ["gpu_lost", "xid_reboot"]  # NVML lost it; the Xid's catalogue action is a reboot
    assert found[0]["subject"] == "0000:3b:00.0" and "not a driver install problem" in found[0]["fix"]
    assert found[1]["subject"] == "0000:3b:00.0" and "Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in (
        found[1]["evidence"]) and found[1]["fix"].startswith("drain the node and reboot it")


def test_ecc_uncorrectable(mock_lib_dir: Path, tmp_path: Path) -> None:
    found = doctor.diagnose(collect(mock_lib_dir, tmp_path, "ecc-uncorrectable", healthy_h200()))
    assert ids(found) == ["ecc_uncorrectable", "row_remap_pending"]
    assert all(d["subject"] == "0000:00:07.0" and "nvidia-smi -r -i 1" in d["fix"] for d in found)
    assert "2 uncorrectable ECC error(s)" in found[0]["evidence"]
    assert "a row remap is pending (1 row(s) remapped for uncorrectable and 0 for correctable" in found[1]["evidence"]


def test_persistence_off_is_a_safe_fix(mock_lib_dir: Path, tmp_path: Path) -> None:
    found = doctor.diagnose(collect(mock_lib_dir, tmp_path, "persistence-off", healthy_h200()))
    assert ids(found) == ["persistence_off"]
    assert found[0]["fixable"] and found[0]["action"] == ["nvidia-smi", "-pm", "1"]


def test_mig_pending(mock_lib_dir: Path, tmp_path: Path) -> None:
    found = doctor.diagnose(collect(mock_lib_dir, tmp_path, "mig-pending", healthy_h200()))
    assert ids(found) == ["mig_pending", "mig_pending"]
    assert "nvidia-smi -r -i 0" in found[0]["fix"] and not found[0]["fixable"]


def test_driver_mismatch(mock_lib_dir: Path, tmp_path: Path) -> None:
    found = doctor.diagnose(collect(mock_lib_dir, tmp_path, "driver-mismatch", healthy_h200()))
    assert ids(found) == ["driver_library_mismatch"]
    assert "580.159.04" in found[0]["evidence"] and "reboot" in found[0]["fix"]
    assert "do not reinstall" in found[0]["fix"]


@pytest.mark.parametrize(
    ("variant", "expected", "action"),
    [
        ({"kernel": kernel()}, "driver_not_loaded", ["modprobe", "nvidia"]),
        ({"kernel": kernel(ok=False, dkms_state="added")}, "dkms_module_missing",
         ["dkms", "autoinstall", "-k", KERNEL]),
        ({"kernel": kernel(ok=False, headers=False, dkms_state="added")}, "kernel_headers_missing", None),
        ({"module_log": ["kernel: Loading of unsigned module is rejected"]}, "secure_boot_rejects_module", None),
    ],
)
def test_driver_not_loaded(variant: dict[str, Any], expected: str, action: list[str] | None, mock_lib_dir: Path,
                           tmp_path: Path) -> None:
    facts = collect(mock_lib_dir, tmp_path, "driver-not-loaded", healthy_h200(driver_loaded=False))
    facts.update(variant)
    found = doctor.diagnose(facts)
    assert ids(found) == [expected]
    assert found[0]["action"] == action
    if expected == "kernel_headers_missing":
        assert f"apt-get install linux-headers-{KERNEL}" in found[0]["fix"]
    if expected == "secure_boot_rejects_module":
        assert "mokutil --import" in found[0]["fix"]


def test_nouveau_bound(mock_lib_dir: Path, tmp_path: Path) -> None:
    facts = collect(mock_lib_dir, tmp_path, "driver-not-loaded", healthy_h200(driver_loaded=False))
    facts["pci"]["modules"]["nouveau"] = True
    facts["pci"]["bindings"] = dict.fromkeys(H200X2_BUS, "nouveau")
    found = doctor.diagnose(facts)
    assert ids(found) == ["nouveau_loaded"]
    assert "--tags nouveau" in found[0]["fix"] and "update-initramfs -u -k all" in found[0]["fix"]


def test_no_gpu(mock_lib_dir: Path, tmp_path: Path) -> None:
    found = doctor.diagnose(collect(mock_lib_dir, tmp_path, "no-gpu", Tree(driver_loaded=False)))
    assert ids(found) == ["gpu_not_on_bus"]
    assert "reseat" in found[0]["fix"]


# -- pure rules ----------------------------------------------------------------------------------------------


def _gpu(index: int = 0, **live: Any) -> dict[str, Any]:
    return {"index": index, "lost": False, "pci_bus_id_sysfs": f"0000:0{index}:00.0", "live": live}


def test_utilisation_swinging_thresholds() -> None:
    assert swinging([100, 0, 0, 100, 0, 95, 0, 0, 100, 5])
    assert not swinging([95, 97, 99, 96, 98])  # busy and steady
    assert not swinging([0, 0, 0, 0, 0])  # idle
    assert not swinging([100, 0, 100])  # too few samples
    assert not swinging([60, 80, 55, 90, 70, 65])  # varies, but never idle
    facts = {"nvml": {"available": True, "count": 1, "gpus": [_gpu()]},
             "samples": {"window_s": 10, "gpus": {"0": [100, 0, 0, 100, 0, 95, 0, 0, 100, 5]}}}
    d = only(rules.diagnose(facts), "utilization_swinging")
    assert "num_workers" in d["fix"] and d["severity"] == "warn"


def test_throttle_and_temperature() -> None:
    facts = {"nvml": {"available": True, "count": 1, "gpus": [_gpu(temperature_c=91)]},
             "throttle": {"0": 0x1 | 0x40}}
    found = rules.diagnose(facts)
    assert ids(found) == ["gpu_hot", "gpu_throttled"]
    assert "HW thermal slowdown" in found[1]["evidence"]
    assert rules.diagnose({"throttle": {"0": 0x1 | 0x4}}) == []  # idle / power cap: normal


def test_stale_device_holders() -> None:
    holders = [{"pid": 10, "command": "nvidia-persistenced", "devices": ["/dev/nvidiactl"]},
               {"pid": 42, "command": "python", "devices": ["/dev/nvidia0", "/dev/nvidiactl"]},
               {"pid": 43, "command": "python", "devices": ["/dev/nvidia1"]}]
    found = rules.diagnose({"holders": holders, "nvml_pids": [43]})
    assert [(d["id"], d["subject"]) for d in found] == [("stale_device_holder", "pid 42")]
    assert "kill 42" in found[0]["fix"]
    unknown = rules.diagnose({"holders": holders, "nvml_pids": None})
    assert [d["severity"] for d in unknown] == ["info", "info"]
    assert rules.problems(unknown) == []


def test_parse_fuser() -> None:
    text = ("                     USER        PID ACCESS COMMAND\n"
            "/dev/nvidia0:        root       4242 F...m python\n"
            "                     root       4243 F.... python3\n"
            "/dev/nvidiactl:      root       4242 F.... python\n"
            "/dev/nvidia1:        ml         4250 F.... Web Content\n"
            "                     ml         4251 F.... \x1b[2Jx\n")
    assert doctor.parse_fuser(text) == [
        {"pid": 4242, "command": "python", "devices": ["/dev/nvidia0", "/dev/nvidiactl"]},
        {"pid": 4243, "command": "python3", "devices": ["/dev/nvidia0"]},
        {"pid": 4250, "command": "Web Content", "devices": ["/dev/nvidia1"]},
        {"pid": 4251, "command": "\\x1b[2Jx", "devices": ["/dev/nvidia1"]},
    ]


def test_device_holders_scan(tmp_path: Path) -> None:
    fd = tmp_path / "77" / "fd"
    fd.mkdir(parents=True)
    (fd / "3").symlink_to("/dev/nvidia0")
    (fd / "4").symlink_to("/dev/null")
    (tmp_path / "77" / "comm").write_text("train.py\n")
    (tmp_path / "self").mkdir()
    assert holders.collect(str(tmp_path)) == [{"pid": 77, "command": "train.py", "devices": ["/dev/nvidia0"]}]


def test_device_holders_scan_escapes_control_characters_in_names(tmp_path: Path) -> None:
    fd = tmp_path / "78" / "fd"
    fd.mkdir(parents=True)
    (fd / "3").symlink_to("/dev/nvidia0")
    (tmp_path / "78" / "comm").write_text("\x1b[31mred\n")
    assert [h["command"] for h in holders.collect(str(tmp_path))] == ["\\x1b[31mred"]


def test_rules_are_python38_syntax() -> None:
    import ast

    files = sorted((ROOT / "plugins" / "module_utils").glob("doctor*.py"))
    assert len(files) > 1
    for path in files:
        ast.parse(path.read_text(), feature_version=(3, 8), filename=str(path))
