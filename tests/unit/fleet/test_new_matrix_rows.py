"""Fleets on the matrix's CUDA 13.x rows and its 2024-2026 GPU models validate as NVIDIA's data says."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet import Fleet
from gpuprov.fleet.loader import load_text
from gpuprov.fleet.validate import validate_loaded

FLEET = """version: 1
settings:
  os: {os}
  gpus: {{model: {model}, count: {count}{gpus}}}
{settings}
hosts:
  h: {{address: 10.0.0.1}}
"""


def _fleet(model: str, settings: str = "", count: int = 8, os: str = "ubuntu2404", gpus: str = "") -> Fleet:
    text = FLEET.format(model=model, count=count, settings=settings, os=os, gpus=gpus)
    return validate_loaded(load_text(text, "t.yml"), Path("t.yml"))


def _problems(model: str, settings: str = "", count: int = 8, os: str = "ubuntu2404", gpus: str = "") \
        -> dict[str, str]:
    with pytest.raises(FleetValidationError) as info:
        _fleet(model, settings, count, os, gpus)
    return {p.path: f"{p.problem} - {p.fix}" for p in info.value.problems}


def test_cuda_13_1_with_cudnn_9_17_runs_on_r580_under_minor_compatibility() -> None:
    host = _fleet("B300", '  cuda: {version: "13.1"}\n  cudnn: {version: "9.17.0"}\n  driver: {branch: "580"}\n'
                  ).hosts["h"]
    assert any("older than 590.44.01, which CUDA 13.1 shipped with" in note for note in host.notes)


def test_auto_takes_the_long_term_branch_that_runs_cuda_13_1_fully() -> None:
    """CUDA 13.1 shipped with R590: of the branches the OS row lists, R620 is the long-term support branch that
    runs it with full compatibility, so auto takes it over R580 (minor-version compatibility only)."""
    host = _fleet("B300", '  cuda: {version: "13.1"}\n').hosts["h"]
    assert host.settings["driver"]["branch"] == "620"
    assert any("runs CUDA 13.1 with full compatibility" in r.reason for r in host.resolutions)
    assert not any("older than 590.44.01" in note for note in host.notes)


def test_auto_keeps_r580_where_the_cuda_release_runs_on_it() -> None:
    """R620 is long-term too and supported longer, but auto takes the oldest long-term branch still supported
    that fits: R580 for a CUDA 12.9 fleet."""
    host = _fleet("B300", '  cuda: {version: "12.9"}\n').hosts["h"]
    assert host.settings["driver"]["branch"] == "580"
    assert any(r.reason.startswith("oldest still supported ltsb branch") for r in host.resolutions)


def test_auto_still_fails_where_no_branch_runs_the_cuda_release() -> None:
    """V100 ends with R580's predecessor row's max: Volta is out of CUDA 13, so no branch fits at all."""
    got = _problems("V100-SXM2-32GB", '  cuda: {version: "13.1"}\n', os="ubuntu2204")
    assert any("CUDA" in problem for problem in got.values())


def test_cuda_13_3_is_known_but_not_for_ubuntu_20_04() -> None:
    got = _problems("H100-NVL", '  cuda: {version: "13.3"}\n', os="ubuntu2004")
    assert "CUDA 13.3 is not published for ubuntu2004" in got["settings.cuda.version"]


@pytest.mark.parametrize("model", ["GH200", "GB200"])
def test_grace_superchips_are_refused_with_the_reason(model: str) -> None:
    got = _problems(model, count=4)
    assert f"{model} hosts are aarch64" in got["settings.gpus.model"]
    assert "NVIDIA's sbsa repository" in got["settings.gpus.model"]


def test_h100_nvl_takes_its_94_gb_mig_profiles() -> None:
    layouts = '  mig: {layout: half, layouts: {half: [{devices: all, mig_devices: {"3g.47gb": 2}}]}}\n'
    assert _fleet("H100-NVL", layouts, count=2).hosts["h"].settings["mig"]["layout"] == "half"
    got = _problems("H100-NVL", layouts.replace("3g.47gb", "3g.40gb"), count=2)
    assert "not one of H100-NVL's" in got["settings.mig.layouts.half[0].mig_devices.3g.40gb"]


def test_a30_has_four_compute_slices() -> None:
    layouts = '  mig: {layout: x, layouts: {x: [{devices: all, mig_devices: {"4g.24gb": 1, "1g.6gb": 1}}]}}\n'
    got = _problems("A30", layouts, count=2)
    assert "5 compute slices; one A30 has 4" in got["settings.mig.layouts.x[0].mig_devices"]


@pytest.mark.parametrize(("model", "old", "first"),
                         [("H20", "525", "535"), ("RTX-PRO-6000-Blackwell", "570", "575"), ("B300", "575", "580")])
def test_new_models_need_their_first_branch(model: str, old: str, first: str) -> None:
    got = _problems(model, f'  driver: {{branch: "{old}"}}\n', os="ubuntu2204")
    assert f"does not support {model} (first: {first})" in got["settings.driver.branch"]


def test_nvswitch_models() -> None:
    assert _fleet("B300", gpus=", nvswitch: true").hosts["h"].settings["gpus"]["nvswitch"] is True
    got = _problems("H100-NVL", gpus=", nvswitch: true")
    assert "does not sit on an NVSwitch baseboard" in got["settings.gpus.nvswitch"]


@pytest.mark.parametrize("os", ["ubuntu2204", "ubuntu2404", "debian12"])
@pytest.mark.parametrize("branch", ["590", "595", "610", "620"])
def test_branches_from_r590_are_published_for_nvidias_repository(os: str, branch: str) -> None:
    """From R590 NVIDIA's packages carry no branch in their names, but the branches are in its repository."""
    host = _fleet("H100-SXM5-80GB", f'  driver: {{branch: "{branch}", method: cuda-repo}}\n', os=os).hosts["h"]
    assert host.settings["driver"]["branch"] == branch


def test_a_branch_the_os_does_not_get_is_named_with_the_ones_it_does() -> None:
    got = _problems("H100-SXM5-80GB", '  driver: {branch: "595", method: cuda-repo}\n  cuda: {version: "12.4"}\n',
                    os="ubuntu2004")
    assert got["settings.driver.branch"] == (
        "host h: driver branch 595 is not published for ubuntu2004 (method cuda-repo) - use one of 450, 455, 460, "
        "465, 470, 495, 510, 515, 520, 525, 530, 535, 545, 550, 555, 560, 565, 570, 575 on ubuntu2004")
    distro = _problems("H100-SXM5-80GB", '  driver: {branch: "595", method: distro}\n', os="debian12")
    assert distro["settings.driver.branch"] == (
        "host h: driver branch 595 is not published for debian12 (method distro) - use one of 535 on debian12")
