"""Tests for gpuprov.matrix: the data file's shape and the typed queries validate relies on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuprov.matrix import MatrixError, branch_of, load_matrix, matrix_from_text, version_key

REQUIRED_MODELS = ["H200", "H100-SXM5-80GB", "H100-PCIe", "A100-SXM4-80GB", "A100-SXM4-40GB", "A100-PCIe-80GB",
                   "A10", "L4", "L40S", "V100-SXM2-32GB", "V100 PCIe", "T4", "RTX 3090", "RTX 4090", "RTX A6000",
                   "B200", "RTX 5090", "H100 NVL", "H20", "GH200", "B300", "GB200", "L40", "A30", "A40",
                   "RTX 6000 Ada", "RTX PRO 6000 Blackwell", "RTX PRO 6000 Blackwell Server"]


def test_loaded_once() -> None:
    assert load_matrix() is load_matrix()


@pytest.mark.parametrize("model", REQUIRED_MODELS)
def test_required_models_present(model: str) -> None:
    assert load_matrix().gpu(model) is not None


def test_every_row_cites_an_nvidia_source() -> None:
    raw = load_matrix().raw
    rows = [*raw["cuda"], *raw["cudnn"], *raw["nccl"], *raw["gpus"], *raw["driver_branches"], *raw["os"].values(),
            *raw["mig"]]
    for row in rows:
        assert row["source"].startswith("https://") and "nvidia.com" in row["source"], row
        assert isinstance(row["verified"], bool)


def test_cuda_covers_11_0_to_13_3_with_matching_branches() -> None:
    m = load_matrix()
    assert {"11.0", "12.4", "13.0", "13.1", "13.2", "13.3"} <= set(m.cuda)
    for release in m.cuda.values():
        assert branch_of(release.driver) == release.branch


def test_every_cuda_a_cudnn_build_names_is_a_cuda_row() -> None:
    m = load_matrix()
    named = {cuda for release in m.cudnn.values() for build in release.builds for cuda in build.cuda}
    assert named - set(m.cuda) == set()
    assert m.toolkit_driver("13.1") == "590.44.01" and m.min_driver("13.1") == "580.65.06"


def test_gpu_rows_name_the_fields_they_checked() -> None:
    m = load_matrix()
    for gpu in m.gpus.values():
        assert gpu.verified or gpu.checked, gpu.model  # every row was checked against NVIDIA's pages somewhere
    assert m.gpu("B300").checked == ("compute_capability", "mig", "min_branch", "min_cuda")  # type: ignore[union-attr]
    assert m.gpu("T4").checked == ("mig",)  # type: ignore[union-attr]


def test_a_malformed_gpu_row_is_a_matrix_error() -> None:
    text = (Path(__file__).resolve().parents[2] / "plugins" / "plugin_utils" / "matrix.yml").read_text()
    with pytest.raises(MatrixError, match="no GPU fields"):
        matrix_from_text(text.replace("checked: [mig]", "checked: [cc]", 1))
    with pytest.raises(MatrixError, match="host_arch 'arm'"):
        matrix_from_text(text.replace("host_arch: aarch64", "host_arch: arm", 1))
    assert matrix_from_text(text).gpu("GB200").host_arch == "aarch64"  # type: ignore[union-attr]


def test_driver_queries() -> None:
    m = load_matrix()
    assert m.toolkit_driver("12.4") == "550.54.14"
    assert m.min_driver("12.4") == "525.60.13"
    assert m.min_driver("12.4.1") == "525.60.13"
    assert not m.branch_supports_cuda("470", "12.4")
    assert m.branch_supports_cuda("535", "12.4")
    assert branch_of("535.104.05") == "535"
    assert version_key("535.104.05") > version_key("535.54.03")


def test_open_module_policy() -> None:
    m = load_matrix()
    assert m.open_module_policy("V100-PCIe") == "unsupported"
    assert m.open_module_policy("T4") == "supported"
    assert m.open_module_policy("H100-SXM5-80GB") == "supported"
    assert m.open_module_policy("B200") == "required"
    assert m.open_module_policy("RTX 5090") == "required"
    assert m.open_module_policy("nope") is None


def test_library_compatibility() -> None:
    m = load_matrix()
    assert m.cudnn_build("8.6.0", "12.4") is None
    build = m.cudnn_build("9.1.0", "12.4")
    assert build is not None and build.min_driver == "525.60.13"
    assert m.cudnn_build("9.17.0", "13.0") is not None
    assert m.nccl_supports("2.21.5", "12.4")
    assert not m.nccl_supports("2.15.5", "12.4")


def test_os_availability() -> None:
    m = load_matrix()
    assert m.os_has_cuda("ubuntu2404", "13.1") and not m.os_has_cuda("ubuntu2004", "13.1")
    assert m.os_has_branch("ubuntu2004", "580") is False
    assert m.os_has_branch("ubuntu2204", "580") is True
    assert m.os_has_branch("ubuntu2204", "580", "ubuntu-drivers") is None
    assert not m.os_has_cuda("ubuntu2004", "13.0")
    assert m.os_has_cuda("debian12", "12.4")
    assert not m.os_has_cuda("debian12", "12.1")
    assert m.fabric_manager_available("ubuntu2204", "cuda-repo")
    assert not m.fabric_manager_available("debian12", "distro")
    assert not m.fabric_manager_available("ubuntu2204", "runfile")


def test_nvswitch_and_mig_flags() -> None:
    m = load_matrix()
    assert m.gpu("H100-PCIe").nvswitch_capable is False  # type: ignore[union-attr]
    assert m.gpu("H200").nvswitch_capable is True  # type: ignore[union-attr]
    assert m.gpu("A10").mig is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("nvml_name", "model"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("NVIDIA GeForce RTX 3090", "RTX-3090"),
        ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
        ("Tesla V100-PCIE-32GB", "V100-PCIe"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA H200 NVL", "H200"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell-Server"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX-PRO-6000-Blackwell"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA Made-Up 9000", None),
    ],
)
def test_gpu_for_nvml_name(nvml_name: str, model: str | None) -> None:
    found = load_matrix().gpu_for_nvml_name(nvml_name)
    assert (found.model if found else None) == model


def test_every_mig_gpu_has_its_profiles() -> None:
    m = load_matrix()
    assert {g.model for g in m.gpus.values() if g.mig} == set(m.mig)
    for geometry in m.mig.values():
        assert (geometry.compute_slices, geometry.memory_slices) in ((7, 8), (4, 4))  # A30, RTX PRO 6000: 4/4
        for profile in geometry.profiles.values():
            assert profile.name.startswith(f"{profile.compute}g.")  # <n>g: n compute slices
            assert profile.compute * min(profile.most, 1) <= geometry.compute_slices
            assert profile.memory * profile.most <= geometry.memory_slices or profile.name.endswith("+me")
    assert m.mig_geometry("a100 sxm4 40gb") is m.mig["A100-SXM4-40GB"]
    assert m.mig_geometry("T4") is None


def test_mig_profiles_agree_with_the_mock_nvml() -> None:
    """The mock NVML's profile tables (gpuprov/lab/mocknvml/src/mig.c) serve the same profiles: name, compute slices,
    most instances and memory slices (its placement size)."""
    source = (Path(__file__).resolve().parents[2] / "gpuprov" / "lab" / "mocknvml" / "src" / "mig.c").read_text()
    row = re.compile(r'\{\d+, \d+, "([^"]+)", (\d+), (\d+), \d+, \d+, \d+, \d+, \d+, \d+, \d+, (\d+), \d+, \d+\}')
    tables = {"a100_40gb": "A100-SXM4-40GB", "a100_80gb": "A100-SXM4-80GB", "h100_80gb": "H100-SXM5-80GB",
              "h200_141gb": "H200"}
    m = load_matrix()
    for table, model in tables.items():
        body = source.split(f"gi_profile {table}[] = {{", 1)[1].split("};", 1)[0]
        mock = {name: (int(c), int(mem), int(most)) for name, c, most, mem in row.findall(body)}
        ours = {p.name: (p.compute, p.memory, p.most) for p in m.mig[model].profiles.values()}
        assert mock == ours, model
