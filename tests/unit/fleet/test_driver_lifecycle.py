"""NVIDIA's driver lifecycle in validation: a branch past its end of life is a warning naming the branch that
replaces it (an error with --strict), and ``auto`` never picks one. The day is fixed, so the end-of-life dates
in the matrix decide the outcome, not the day the tests run."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest
from rich.console import Console

from gpuprov import engine
from gpuprov.cli.__main__ import main
from gpuprov.engine import ApplyOptions
from gpuprov.fleet import Fleet, checks
from gpuprov.fleet.loader import load_text
from gpuprov.fleet.validate import validate_loaded
from gpuprov.matrix import DriverBranch, load_matrix

DAY = dt.date(2026, 12, 4)  # after R535's end of life (June 2026), before R580's (June 2028)


@pytest.fixture(autouse=True)
def _today(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "today", lambda: DAY)


def _text(os_name: str, model: str, driver: str, cuda: str = "12.2") -> str:
    return (f"version: 1\nsettings:\n  os: {os_name}\n  gpus: {{model: {model}, count: 2}}\n"
            f"  driver: {driver}\n  cuda: {{version: \"{cuda}\"}}\nhosts:\n  gpu01: {{address: 10.0.0.11}}\n")


def _validate(text: str) -> Fleet:
    return validate_loaded(load_text(text, "f.yml"), Path("f.yml"))


def test_end_of_life_is_the_month_after_the_published_one() -> None:
    branch = DriverBranch("535", "ltsb", True, "https://example.invalid", "2026-06")
    assert not branch.ended(dt.date(2026, 6, 30))
    assert branch.ended(dt.date(2026, 7, 1))
    assert branch.eol_text() == "June 2026"
    assert not DriverBranch("570", "production", False, "https://example.invalid").ended(dt.date(2099, 1, 1))


def test_the_matrix_carries_nvidias_current_branches_with_their_end_of_life() -> None:
    branches = load_matrix().branches
    assert {b: (branches[b].kind, branches[b].eol) for b in ("535", "580", "595", "610", "620")} == {
        "535": ("ltsb", "2026-06"), "580": ("ltsb", "2028-06"), "595": ("production", "2027-03"),
        "610": ("feature", "2026-08"), "620": ("ltsb", "2029-09")}
    assert all(branches[b].verified and branches[b].source.startswith("https://docs.nvidia.com/") for b in
               ("535", "580", "595", "610", "620"))


def test_a_branch_past_end_of_life_is_a_warning_naming_its_replacement() -> None:
    fleet = _validate(_text("ubuntu2204", "H100-SXM5-80GB", '{branch: "535"}'))
    settings = fleet.hosts["gpu01"].settings
    assert settings["driver"]["branch"] == "535"  # kept: a warning, not a change
    [warning] = fleet.warnings
    assert (warning.line, warning.path) == (5, "settings.driver.branch")
    assert "driver branch 535 (long-term support branch) reached end of life in June 2026" in warning.problem
    assert warning.fix == 'move to driver.branch "580" (long-term support branch, supported to June 2028)'


def test_without_a_supported_branch_for_the_host_the_fix_says_why() -> None:
    fleet = _validate(_text("ubuntu2004", "V100-PCIe", '{branch: "535"}'))
    [warning] = fleet.warnings
    assert warning.fix == (
        "no branch NVIDIA still supports fits this host (ubuntu2004, method cuda-repo, its GPU and CUDA): a newer OS "
        "carries newer branches (`gpuprov matrix --section os`, `--section driver_branches`)")
    # Debian 12's own archive carries R535 only; NVIDIA's repository for Debian 12 carries R580
    text = _text("debian12", "H100-SXM5-80GB", '{branch: "535", method: distro}').replace('"12.2"', "null")
    [distro] = _validate(text).warnings
    assert distro.fix.startswith("no branch NVIDIA still supports fits this host (debian12, method distro, its GPU "
                                 "and CUDA): method cuda-repo or a newer OS carries newer branches")


def test_a_supported_branch_has_no_warning() -> None:
    assert _validate(_text("ubuntu2204", "H100-SXM5-80GB", '{branch: "580"}')).warnings == []


def test_auto_never_picks_a_branch_past_its_end_of_life(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _text("ubuntu2204", "H100-SXM5-80GB", "{branch: auto}")
    fleet = _validate(text)
    assert fleet.hosts["gpu01"].settings["driver"]["branch"] == "580"
    assert "NVIDIA supports it to June 2028" in fleet.hosts["gpu01"].resolutions[0].reason
    monkeypatch.setattr(checks, "today", lambda: dt.date(2028, 7, 1))  # R580 has ended
    later = _validate(text)
    assert later.hosts["gpu01"].settings["driver"]["branch"] != "580"
    assert later.warnings == []


def test_validate_prints_the_warning_and_strict_makes_it_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "f.yml"
    fleet.write_text(_text("ubuntu2204", "H100-SXM5-80GB", '{branch: "535"}'))
    assert main(["validate", str(fleet), "--no-file-checks", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"warning: {fleet}:5: settings.driver.branch: host gpu01: driver branch 535 ")
    assert main(["validate", str(fleet), "--no-file-checks", "--strict"]) == 2
    captured = capsys.readouterr()
    assert f"{fleet}:5: settings.driver.branch: host gpu01: driver branch 535" in captured.out
    assert "1 problem in" in captured.err and "Traceback" not in captured.err


def test_apply_prints_the_warnings_before_it_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Ran(Exception):
        pass

    def run_playbook(request: object, on_event: object = None) -> None:
        raise Ran

    fleet = tmp_path / "f.yml"
    fleet.write_text(_text("ubuntu2204", "H100-SXM5-80GB", '{branch: "535"}'))
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(engine, "run_playbook", run_playbook)
    out = io.StringIO()
    with pytest.raises(Ran):
        engine.execute(ApplyOptions(fleet=fleet, roles=["nouveau"], check=True), Console(file=out, width=400))
    first = out.getvalue().splitlines()[0]
    assert first.startswith(f"warning: {fleet}:5: settings.driver.branch: host gpu01: driver branch 535 "), first


def test_an_undated_branch_older_than_an_ended_long_term_branch_has_ended_too() -> None:
    """R470, which NVIDIA's table gives no date: R535, a newer long-term branch, ended in June 2026, and no branch
    outlives a newer long-term one."""
    assert load_matrix().branches["470"].eol is None
    text = _text("ubuntu2004", "A100-PCIe-40GB", '{branch: "470"}', cuda="11.4")
    [warning] = _validate(text).warnings
    assert warning.path == "settings.driver.branch"
    assert ("driver branch 470 (long-term support branch) reached end of life no later than June 2026, when the "
            "newer long-term support branch 535 did") in warning.problem
    assert not checks._newer_ended_ltsb(load_matrix(), "580", DAY)  # nothing newer has ended: no warning


RUNFILE_SITE = """\
version: 1
settings:
  os: ubuntu2004
  gpus: {model: A100-PCIe-40GB, count: 4}
  driver: {method: runfile, branch: "470", version: "470.256.02",
           runfile_url: "https://mirror.example.com/NVIDIA-Linux-x86_64-470.256.02.run", runfile_sha256: "ZERO"}
  cuda: {method: runfile, version: "11.4.4", runfile_url: "https://mirror.example.com/cuda_11.4.4_470.82.01_linux.run",
         runfile_sha256: "ONE"}
  cudnn: {method: archive, version: "8.9.7.29", archive_sha256: "TWO",
          archive_url: "https://mirror.example.com/cudnn-linux-x86_64-8.9.7.29_cuda11-archive.tar.xz"}
hosts:
  gpu01: {address: 10.0.0.11}
""".replace("ZERO", "0" * 64).replace("ONE", "1" * 64).replace("TWO", "2" * 64)


def test_a_site_on_nvidias_files_of_2021_validates_with_the_end_of_life_warning() -> None:
    """The runfile way of the guides this project implements: Ubuntu 20.04, driver 470 and CUDA 11.4 from NVIDIA's
    runfiles, cuDNN 8 from its archive."""
    fleet = _validate(RUNFILE_SITE)
    settings = fleet.hosts["gpu01"].settings
    assert (settings["driver"]["method"], settings["cuda"]["method"], settings["cudnn"]["method"]) == (
        "runfile", "runfile", "archive")
    assert [w.path for w in fleet.warnings] == ["settings.driver.branch"]
