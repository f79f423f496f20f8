"""Tests for ``gpuprov matrix``."""

from __future__ import annotations

import json
import re

import pytest

from gpuprov.cli.__main__ import main


def test_json_sections(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--json", "--section", "cuda", "--section", "gpus"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"cuda", "gpus"}
    assert any(row["version"] == "12.4" and row["driver"] == "550.54.14" for row in data["cuda"])


def test_tables_show_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix"]) == 0
    out = capsys.readouterr().out
    for word in ("CUDA toolkit", "cuDNN builds", "NCCL builds", "GPU models", "per OS", "Driver branches", "B200",
                 "MIG profiles", "1g.10gb 1/2 x4"):
        assert word in out


def test_unknown_section_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--section", "nope"]) == 2


def test_cuda_13_and_current_branches_are_listed_with_their_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--section", "cuda", "--section", "driver_branches"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    for cuda, driver in (("13.0", "580.65.06"), ("13.1", "590.44.01"), ("13.2", "595.45.04"), ("13.3", "610.43.02")):
        assert driver in rows[cuda]
    for branch, eol in (("580", "June 2028"), ("595", "March 2027"), ("610", "August 2026"), ("620", "September 2029")):
        assert eol in rows[branch]
    cuda, branches = out.split("Driver branches")  # each table numbers its own sources
    cited = [dict(re.findall(r"^(\[\d+\]) (https://\S+)$", part, re.MULTILINE)) for part in (cuda, branches)]
    assert cited[0][re.findall(r"\[\d+\]", rows["13.1"])[-1]] == \
        "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"
    assert "drivers/620/supported-drivers" in cited[1][re.findall(r"\[\d+\]", rows["620"])[-1]]


def test_update_is_a_sub_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "update", "--help"]) == 0
    assert "--packages URL|PATH" in capsys.readouterr().out
    assert main(["matrix", "update"]) == 2  # --packages is required
