"""The real nvidia-smi (Debian bookworm 535.261.03) on the mock NVML.

Builds the mock, fetches nvidia-smi from Debian non-free once (cached in ~/.cache/gpuprov, skipped
with the reason when it cannot be fetched), runs it with LD_LIBRARY_PATH pointing at the mock and
asserts what it prints for the h200x2 profile (against the real capture's CSV) and for each fault.
The valgrind tests fail on any memory error with a frame in the mock library.
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpuprov.exceptions import EnvironmentMissing
from gpuprov.lab.mocknvml import build_library, mock_environment
from gpuprov.lab.mocknvml.smi import fetch_nvidia_smi

QUERY = (
    "index,name,uuid,pci.bus_id,driver_version,memory.total,persistence_mode,pcie.link.gen.max,pcie.link.width.current"
)
# From tests/data/nvml-h200x2/probe.txt (the real host's --query-gpu CSV), same columns.
CAPTURED_CSV = [
    "index, name, uuid, pci.bus_id, driver_version, memory.total [MiB], persistence_mode, pcie.link.gen.max, "
    "pcie.link.width.current",
    "0, NVIDIA H200, GPU-00000000-0000-4000-8000-000000000000, 00000000:00:06.0, 580.159.04, 143771 MiB, "
    "Enabled, 5, 16",
    "1, NVIDIA H200, GPU-00000000-0000-4000-8000-000000000001, 00000000:00:07.0, 580.159.04, 143771 MiB, "
    "Enabled, 5, 16",
]


@pytest.fixture(scope="module")
def nvidia_smi() -> Path:
    try:
        return fetch_nvidia_smi()
    except EnvironmentMissing as exc:
        pytest.skip(f"real nvidia-smi unavailable: {exc}")


@pytest.fixture(scope="module")
def lib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the mock NVML")
    out = tmp_path_factory.mktemp("mocknvml")
    build_library(out)
    return out


def smi(nvidia_smi: Path, lib_dir: Path, profile: str, *args: str, wrapper: tuple[str, ...] = ()) -> tuple[int, str]:
    env = mock_environment(lib_dir, profile, lib_dir / "conf")
    proc = subprocess.run(
        [*wrapper, str(nvidia_smi), *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("args", [(), ("-L",), ("-q",), ("-q", "-x")], ids=["table", "-L", "-q", "-q-x"])
def test_h200x2_views_exit_zero(nvidia_smi: Path, lib_dir: Path, args: tuple[str, ...]) -> None:
    rc, out = smi(nvidia_smi, lib_dir, "h200x2", *args)
    assert rc == 0, out
    if args != ("-L",):  # -L lists GPUs only
        assert "580.159.04" in out
    if args:  # the table view shows no UUIDs
        assert "GPU-00000000-0000-4000-8000-000000000001" in out
    if args == ("-q", "-x"):
        root = ET.fromstring(out)
        gpus = root.findall("gpu")
        assert [g.get("id") for g in gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
        assert gpus[0].findtext("bar1_memory_usage/total") == "262144 MiB"
        assert gpus[0].findtext("mig_mode/current_mig") == "Disabled"


def test_h200x2_table(nvidia_smi: Path, lib_dir: Path) -> None:
    rc, out = smi(nvidia_smi, lib_dir, "h200x2")
    assert rc == 0
    assert "Driver Version: 580.159.04   CUDA Version: 13.0" in out
    assert "NVIDIA H200                    On  | 00000000:00:06.0 Off |" in out
    assert "No running processes found" in out


def test_h200x2_query_csv_equals_the_capture(nvidia_smi: Path, lib_dir: Path) -> None:
    rc, out = smi(nvidia_smi, lib_dir, "h200x2", f"--query-gpu={QUERY}", "--format=csv")
    assert rc == 0, out
    assert out.splitlines() == CAPTURED_CSV


@pytest.mark.parametrize(
    ("profile", "rc", "text"),
    [
        ("driver-not-loaded", 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
        ("no-gpu", 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
        ("driver-mismatch", 18, "Failed to initialize NVML: Driver/library version mismatch"),
        ("no-devices", 6, "No devices were found"),
        ("xid79", 15, "GPU is lost.  Reboot the system to recover this GPU"),
    ],
)
def test_faults_as_nvidia_smi_shows_them(nvidia_smi: Path, lib_dir: Path, profile: str, rc: int, text: str) -> None:
    got_rc, out = smi(nvidia_smi, lib_dir, profile)
    assert (got_rc, text in out) == (rc, True), out


@pytest.mark.parametrize(
    ("profile", "query", "expected"),
    [
        ("persistence-off", "persistence_mode", ["Disabled", "Disabled"]),
        ("mig-pending", "mig.mode.current,mig.mode.pending", ["Disabled, Enabled", "Disabled, Enabled"]),
        ("ecc-uncorrectable", "ecc.errors.uncorrected.volatile.total", ["0", "2"]),
        ("above4g-off", "memory.total", ["143771 MiB", "143771 MiB"]),
        ("pcie-idle-downclock", "pcie.link.gen.current,pcie.link.gen.max", ["1, 5", "1, 5"]),
        ("rtx3090x4", "pcie.link.width.max,ecc.mode.current,mig.mode.current", ["8, [N/A], [N/A]"] * 4),
        (
            "heterogeneous-ordering",
            "name,pci.bus_id",
            ["DGX Display, 00000000:01:00.0"]
            + [f"NVIDIA A100-SXM4-80GB, 00000000:{b}:00.0" for b in ("07", "47", "81", "C2")],
        ),
    ],
)
def test_profiles_through_query_gpu(
    nvidia_smi: Path, lib_dir: Path, profile: str, query: str, expected: list[str]
) -> None:
    rc, out = smi(nvidia_smi, lib_dir, profile, f"--query-gpu={query}", "--format=csv,noheader")
    assert rc == 0, out
    assert out.splitlines() == expected


def test_pcie_downtrained_in_q(nvidia_smi: Path, lib_dir: Path) -> None:
    rc, out = smi(nvidia_smi, lib_dir, "pcie-downtrained", "-q", "-i", "2", "-d", "PERFORMANCE,UTILIZATION")
    assert rc == 0, out
    rc, out = smi(
        nvidia_smi,
        lib_dir,
        "pcie-downtrained",
        "--query-gpu=pcie.link.gen.max,pcie.link.width.max,utilization.gpu",
        "--format=csv,noheader",
        "-i",
        "2",
    )
    assert out.splitlines() == ["3, 4, 98 %"]


def _mock_errors(xml_file: Path) -> list[str]:
    """Valgrind errors that have a frame in the mock library (nvidia-smi's own are not ours)."""
    found = []
    for error in ET.parse(xml_file).getroot().iter("error"):
        objs = [frame.findtext("obj") or "" for frame in error.iter("frame")]
        if any(obj.endswith("libnvidia-ml.so.1") for obj in objs):
            found.append(f"{error.findtext('kind')}: {error.findtext('what') or error.findtext('xwhat/text')}")
    return found


@pytest.mark.parametrize(
    ("profile", "args"),
    [
        ("h200x2", ()),
        ("h200x2", ("-L",)),
        ("h200x2", ("-q",)),
        ("h200x2", ("-q", "-x")),
        ("h200x2", (f"--query-gpu={QUERY}", "--format=csv")),
        ("xid79", ()),
        ("no-devices", ()),
        ("driver-mismatch", ()),
        ("heterogeneous-ordering", ("-q",)),
    ],
)
def test_valgrind_clean(nvidia_smi: Path, lib_dir: Path, tmp_path: Path, profile: str, args: tuple[str, ...]) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind not installed")
    xml_file = tmp_path / "valgrind.xml"
    wrapper = ("valgrind", "-q", "--leak-check=no", "--xml=yes", f"--xml-file={xml_file}")
    rc, out = smi(nvidia_smi, lib_dir, profile, *args, wrapper=wrapper)
    assert rc in (0, 6, 15, 18), out
    assert _mock_errors(xml_file) == []
