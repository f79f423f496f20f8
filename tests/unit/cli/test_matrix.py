"""Tests for ``gpuprov matrix``."""

from __future__ import annotations

import json

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
