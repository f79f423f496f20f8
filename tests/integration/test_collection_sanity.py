"""``ansible-test sanity`` on the built gpuprov.gpu collection: the tests that run offline.

The other sanity tests (pep8, pylint, validate-modules, yamllint, import, ansible-doc, runtime-metadata)
bootstrap a virtual environment with pip from ci-files.testing.ansible.com, which this CI cannot reach; ruff,
ansible-lint and yamllint cover that ground in tests/test_quality.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.collection_build import build_and_install

OFFLINE = ("action-plugin-docs", "compile", "empty-init", "line-endings", "no-assert", "no-get-exception",
           "no-illegal-filenames", "no-smart-quotes", "replace-urlopen", "shebang", "symlinks",
           "use-argspec-type-path", "use-compat-six")


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_and_install(tmp_path_factory.mktemp("sanity")) / "ansible_collections" / "gpuprov" / "gpu"


def _sanity(collection: Path, *tests: str) -> subprocess.CompletedProcess[str]:
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    argv = [str(Path(sys.executable).with_name("ansible-test")), "sanity", "--python", python, "--color", "no"]
    for test in tests:
        argv += ["--test", test]
    return subprocess.run(argv, cwd=collection, capture_output=True, text=True, check=False, timeout=600)


def test_offline_sanity_tests_pass(collection: Path) -> None:
    proc = _sanity(collection, *OFFLINE)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert all(f'Running sanity test "{test}"' in proc.stdout + proc.stderr for test in OFFLINE)


def test_the_sanity_run_sees_a_planted_fault(collection: Path) -> None:
    """The same command fails on a shebang ansible-test rejects, so a pass above is not a run that saw no files."""
    planted = collection / "roles" / "verify" / "files" / "planted.py"
    planted.write_text("#!/usr/bin/env python3\nprint(1)\n", encoding="utf-8")
    try:
        proc = _sanity(collection, "shebang")
    finally:
        planted.unlink()
    assert proc.returncode != 0 and "planted.py:1:1: unexpected non-module shebang" in proc.stdout + proc.stderr
