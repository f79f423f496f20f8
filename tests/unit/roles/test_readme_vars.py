""".ci/readme_vars.py: each role README's variables section matches meta/argument_specs.yml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / ".ci" / "readme_vars.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False, timeout=60)


def test_repo_readmes_match_argument_specs() -> None:
    proc = _run("--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _copy_role(tmp_path: Path, name: str = "nouveau") -> Path:
    roles = tmp_path / "roles"
    shutil.copytree(ROOT / "roles" / name, roles / name)
    return roles


def test_check_fails_with_a_diff_when_the_spec_changes(tmp_path: Path) -> None:
    roles = _copy_role(tmp_path)
    spec = roles / "nouveau" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("default: 1800", "default: 600"))
    defaults = roles / "nouveau" / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text().replace("nouveau_reboot_timeout: 1800", "nouveau_reboot_timeout: 600"))
    proc = _run("--check", "--roles-dir", str(roles))
    assert proc.returncode == 1
    assert "-| `nouveau_reboot_timeout` | int | no | `1800`" in proc.stdout
    assert "+| `nouveau_reboot_timeout` | int | no | `600`" in proc.stdout
    # regenerating brings it back in step
    assert _run("--roles-dir", str(roles)).returncode == 0
    assert _run("--check", "--roles-dir", str(roles)).returncode == 0


def test_check_fails_when_defaults_drift_from_the_spec(tmp_path: Path) -> None:
    roles = _copy_role(tmp_path)
    defaults = roles / "nouveau" / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text() + "\nnouveau_undocumented: 1\n")
    proc = _run("--check", "--roles-dir", str(roles))
    assert proc.returncode == 1
    assert "nouveau_undocumented is not in meta/argument_specs.yml" in proc.stderr


def test_readme_without_heading_is_bad_input(tmp_path: Path) -> None:
    roles = _copy_role(tmp_path)
    (roles / "nouveau" / "README.md").write_text("# nouveau\n\nNo variables section.\n")
    assert _run("--check", "--roles-dir", str(roles)).returncode == 2
