"""Tests for ``gpuprov validate``: exit codes and the exact ``FILE:LINE: field: problem - fix`` lines."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprov.cli.__main__ import main

DATA = Path(__file__).resolve().parents[2] / "data"
BAD = sorted((DATA / "bad").glob("*.yml"))
GOOD = sorted((DATA / "good").glob("*.yml"))
SCRIPT = Path(sys.executable).parent / "gpuprov"


def expectations(path: Path) -> dict[str, int]:
    """Expected field -> line from the `# expect:` header and the `# <- field` markers."""
    lines = path.read_bytes().split(b"\n")
    fields = lines[0].decode().removeprefix("# expect:").split("#")[0].split()
    found: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        for marker in re.findall(rb"# <- (\S+)", raw):
            found.setdefault(marker.decode(), number)
    return {f: found[f] for f in fields}


def assert_reported(path: Path, stdout: str) -> None:
    for field, line in expectations(path).items():
        assert f"{path}:{line}: {field}: " in stdout, f"{path.name}: no line {line} for {field} in:\n{stdout}"
    for out_line in stdout.splitlines():
        assert re.match(rf"^{re.escape(str(path))}:\d+: \S+: .+ - .+$", out_line), out_line


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_files_exit_2_with_field_and_line(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert_reported(path, out)
    assert "Traceback" not in out + err
    assert re.search(r"gpuprov: error: \d+ problems? in ", err)


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_files_exit_0_with_summary(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(path)]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith(f"{path}: OK - ")
    assert "auto driver.branch" in out or "auto driver.flavour" in out


def test_quiet_prints_nothing_but_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    """-q keeps the summary out; a warning (an end-of-life driver branch) still prints."""
    for path in GOOD:
        assert main(["validate", "-q", str(path)]) == 0
        out = capsys.readouterr().out
        assert all(line.startswith(f"warning: {path}:") for line in out.splitlines()), out


def test_console_script_reports_every_problem() -> None:
    path = DATA / "bad" / "multiple_problems.yml"
    proc = subprocess.run([str(SCRIPT), "validate", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert_reported(path, proc.stdout)
    assert len(proc.stdout.splitlines()) == len(expectations(path))
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_no_file_checks_keeps_every_other_rule(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--no-file-checks skips only whether the named files exist here: a relative key path is still refused."""
    assert main(["validate", "--no-file-checks", str(path)]) == 2
    out, err = capsys.readouterr()
    assert_reported(path, out)
    assert "Traceback" not in out + err


def test_no_file_checks_still_names_relative_key_paths(capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA / "bad" / "ssh_paths_relative.yml"
    assert main(["validate", "--no-file-checks", str(path)]) == 2
    out = capsys.readouterr().out
    assert out.count("relative path") == 3 and "absolute path or one under ~/" in out
    assert "does not exist" not in out


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yml"
    assert main(["validate", str(missing)]) == 2
    assert f"{missing}:0: (document): file not found" in capsys.readouterr().out


documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.sampled_from(["version", "hosts", "settings", "groups", "ssh", "address", "os", "gpus", "x"]),
        inner, max_size=4)),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(st.one_of(documents, st.binary(max_size=100)))
def test_cli_never_tracebacks(tmp_path_factory: pytest.TempPathFactory, doc: Any) -> None:
    path = tmp_path_factory.mktemp("h") / "fleet.yml"
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    assert main(["validate", "-q", str(path)]) in (0, 2)
