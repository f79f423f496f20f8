"""Recipe hashing and image naming of the lab base images (no Docker needed)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.lab import images
from gpuprov.lab.imagespecs import SPECS, spec_for


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    """A copy of the real recipe directory, safe to edit."""
    copy = tmp_path / "recipes"
    shutil.copytree(images.RECIPE_DIR, copy)
    return copy


def test_hash_is_stable_and_short(recipe: Path) -> None:
    spec = SPECS["debian12"]
    first = images.recipe_hash(spec, recipe)
    assert first == images.recipe_hash(spec, recipe)
    assert len(first) == 12 and int(first, 16) >= 0
    assert first == images.recipe_hash(spec)  # the copy hashes like the original


def test_hash_differs_between_images() -> None:
    assert images.recipe_hash(SPECS["debian12"]) != images.recipe_hash(SPECS["ubuntu2004"])


def test_hash_changes_when_a_recipe_file_changes(recipe: Path) -> None:
    spec = SPECS["ubuntu2004"]
    before = images.recipe_hash(spec, recipe)
    script = recipe / "configure.sh"
    script.write_text(script.read_text() + "\n# changed\n")
    assert images.recipe_hash(spec, recipe) != before


def test_hash_changes_when_a_recipe_file_is_added_or_renamed(recipe: Path) -> None:
    spec = SPECS["debian12"]
    before = images.recipe_hash(spec, recipe)
    (recipe / "extra.conf").write_text("x\n")
    added = images.recipe_hash(spec, recipe)
    assert added != before
    (recipe / "extra.conf").rename(recipe / "other.conf")
    assert images.recipe_hash(spec, recipe) not in {before, added}


def test_hash_changes_with_the_spec(recipe: Path) -> None:
    spec = SPECS["debian12"]
    changed = dataclasses.replace(spec, components=("main",))
    assert images.recipe_hash(changed, recipe) != images.recipe_hash(spec, recipe)


def test_hash_ignores_pycache(recipe: Path) -> None:
    spec = SPECS["debian12"]
    before = images.recipe_hash(spec, recipe)
    (recipe / "__pycache__").mkdir()
    (recipe / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert images.recipe_hash(spec, recipe) == before


def test_packages_cover_the_contract() -> None:
    wanted = {
        "systemd", "systemd-sysv", "dbus", "openssh-server", "sudo", "python3", "python3-apt",
        "ca-certificates", "gnupg", "kmod", "initramfs-tools", "linux-image-amd64", "procps", "iproute2",
    }  # fmt: skip
    assert wanted <= set(images.packages())


def test_image_names() -> None:
    assert [images.image_name(name) for name in SPECS] == [
        "gpuprov-lab-debian12", "gpuprov-lab-ubuntu2004", "gpuprov-lab-ubuntu2204", "gpuprov-lab-ubuntu2404"]


def test_unknown_os_is_a_usage_error() -> None:
    with pytest.raises(ConfigError) as err:
        spec_for("ubuntu2604")
    assert err.value.exit_code == 2
    assert "choose one of debian12, ubuntu2004, ubuntu2204, ubuntu2404" in str(err.value)


def test_recipe_names_no_mirror_host() -> None:
    """The mirror is a build-time input: the only URLs in the recipe are os-release's *_URL fields."""
    for path in images.RECIPE_DIR.rglob("*"):
        if path.is_file():
            for line in path.read_text().splitlines():
                if "://" in line:
                    assert re.fullmatch(r'[A-Z_]+_URL="https://[^"]+"', line), f"{path}: {line}"


def test_build_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images.os, "geteuid", lambda: 1000)
    with pytest.raises(EnvironmentMissing, match="needs root"):
        images.check_build_environment()


def test_build_needs_debootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images.os, "geteuid", lambda: 0)
    monkeypatch.setattr(images.shutil, "which", lambda tool: None if tool == "debootstrap" else "/bin/" + tool)
    with pytest.raises(EnvironmentMissing, match="apt-get install debootstrap"):
        images.check_build_environment()
