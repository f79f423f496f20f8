"""The gpuprov.gpu collection ships inside the wheel, and gpuprov finds it there or in a checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpuprov import resources
from gpuprov.exceptions import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_checkout_paths() -> None:
    assert resources.collection_dir() == ROOT
    assert resources.collections_path() == ROOT / ".collections"
    assert resources.playbooks_dir() == ROOT / "playbooks"
    assert (resources.roles_dir() / "nouveau" / "tasks" / "main.yml").is_file()
    assert resources.templates_dir() == ROOT / "templates"


def test_state_dir_honours_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "s"))
    assert resources.state_dir() == tmp_path / "s"
    monkeypatch.delenv("GPUPROV_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "x"))
    assert resources.state_dir() == tmp_path / "x" / "gpuprov"


def test_a_relative_state_dir_is_made_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUPROV_STATE_DIR", "relstate")
    assert resources.state_dir() == tmp_path / "relstate"
    assert resources.state_dir({"GPUPROV_STATE_DIR": "a/b"}) == tmp_path / "a" / "b"
    # the XDG Base Directory specification: a relative XDG_STATE_HOME is invalid and ignored
    assert resources.state_dir({"XDG_STATE_HOME": "rel"}) == Path.home() / ".local" / "state" / "gpuprov"


def test_a_state_dir_of_an_unknown_user_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"GPUPROV_STATE_DIR ~nosuchuser-gpuprov/st: .* - set it to a folder"):
        resources.state_dir({"GPUPROV_STATE_DIR": "~nosuchuser-gpuprov/st"})


def test_cache_dir_honours_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpuprov.lab.images import cache_dir as debootstrap_cache
    from gpuprov.lab.mocknvml.smi import cache_dir as smi_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    assert resources.cache_dir() == tmp_path / "c" / "gpuprov"
    assert debootstrap_cache("bookworm").is_relative_to(tmp_path / "c" / "gpuprov")
    assert smi_cache().is_relative_to(tmp_path / "c" / "gpuprov")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resources.cache_dir() == tmp_path / "home" / ".cache" / "gpuprov"


def test_wheel_carries_the_collection(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(ROOT)],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    wheel = next(tmp_path.glob("gpuprov-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    collection = "ansible_collections/gpuprov/gpu"
    assert f"{collection}/galaxy.yml" in names and f"{collection}/meta/runtime.yml" in names
    assert f"{collection}/plugins/plugin_utils/matrix.yml" in names
    assert "gpuprov/_templates/ansible.cfg.j2" in names
    tracked = subprocess.run(["git", "ls-files", "roles", "playbooks", "plugins", "meta"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    missing = [p for p in tracked if f"{collection}/{p}" not in names]
    assert missing == []
    assert not [n for n in names if n.startswith(("gpuprov/_ansible/", f"{collection}/.collections"))]
