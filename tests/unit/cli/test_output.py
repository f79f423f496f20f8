"""The console of every command: a saved or piped report is not wrapped at 80 columns."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpuprov.cli import cli, output


def test_redirected_output_is_wide_unless_columns_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert output.console().width == output.REDIRECTED_WIDTH  # pytest captures stdout: not a terminal
    assert output.console(width=50).width == 50
    monkeypatch.setenv("COLUMNS", "100")
    assert output.console().width == 100


def test_matrix_table_rows_stay_on_one_line_in_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """`gpuprov matrix` piped to a file: the widest table's rows are not folded at 80 columns."""
    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(cli, ["matrix"])
    assert result.exit_code == 0, result.output
    widths = [len(line) for line in result.output.splitlines()]
    assert max(widths) > 80
