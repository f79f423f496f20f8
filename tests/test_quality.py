"""Lint gates run as tests, so the README's one test command covers them: ruff and mypy (strict) on
gpuprov/, mypy on the collection's Python (pyproject.toml), ansible-lint (profile: production, from
.ansible-lint) and yamllint on roles/ and playbooks/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", ANSIBLE_NOCOLOR="1",
               NO_COLOR="1")
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, check=False, timeout=900)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["ruff", "check", "gpuprov", "tests", "benchmarks", "plugins", ".ci"], id="ruff"),
        pytest.param(["mypy"], id="mypy"),
        pytest.param(["yamllint", "--strict", "roles", "playbooks", "molecule", "inventory"], id="yamllint"),
        pytest.param(["ansible-lint", "--offline", "roles", "playbooks"], id="ansible-lint"),
    ],
)
def test_lint(argv: list[str]) -> None:
    proc = _run(str(BIN / argv[0]), *argv[1:])
    assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    command = ci[-1]
    assert command in readme, f".ci/run's command {command!r} is not the README's test command"
