"""Tests for ``gpuprov bundle``: exit codes, the manifest, the signed flat repository and the mirrors: snippet."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from debian.deb822 import Packages

from gpuprov.cli.__main__ import main
from tests.unit.test_bundle import standin_repo, write_fleet

__all__ = ["standin_repo"]  # the session fixture, shared with tests/unit/test_bundle.py


def test_download_writes_a_signed_flat_repository(standin_repo: tuple[Path, str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _, url = standin_repo
    out = tmp_path / "bundle"
    fleet = write_fleet(tmp_path, url, cuda={"version": "12.8"}, nccl={"version": "2.26.2"}, cudnn={"version": None})
    assert main(["bundle", str(fleet), "-o", str(out), "--base-url", "http://mirror.invalid/b/"]) == 0
    stdout = capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    packages = manifest["oses"]["debian12"]["packages"]
    repo = out / "debian12"
    index = {(p["Package"], p["Version"]): p for p in Packages.iter_paragraphs(
        gzip.decompress((repo / "Packages.gz").read_bytes()).decode().splitlines(keepends=True), use_apt_pkg=False)}
    assert set(index) == {(p["name"], p["version"]) for p in packages}
    for package in packages:
        paragraph = index[(package["name"], package["version"])]
        deb = repo / paragraph["Filename"]
        assert paragraph["Filename"] == "./" + Path(package["filename"]).name
        assert hashlib.sha256(deb.read_bytes()).hexdigest() == package["sha256"] == paragraph["SHA256"]
    assert sorted(p.name for p in repo.glob("*.deb")) == sorted(Path(p["filename"]).name for p in packages)
    # the Release hashes cover the index, InRelease verifies with the published key, whose name the roles derive
    (key,) = repo.glob("*.pub")
    fingerprint = subprocess.run(["gpg", "--batch", "--with-colons", "--show-keys", str(key)], capture_output=True,
                                 text=True, check=True).stdout.split("fpr:::::::::")[1].split(":")[0]
    assert key.name == f"{fingerprint[-8:].lower()}.pub"
    release = (repo / "Release").read_text(encoding="utf-8")
    assert hashlib.sha256((repo / "Packages.gz").read_bytes()).hexdigest() in release
    gpgv = shutil.which("gpgv")
    assert gpgv is not None
    assert subprocess.run([gpgv, "--keyring", str(key), str(repo / "InRelease")], capture_output=True,
                          check=False).returncode == 0
    assert (out / "keys" / "gnupg").stat().st_mode & 0o077 == 0  # the private key stays private
    assert f"  cuda_repo_url: http://mirror.invalid/b/debian12/\n  cuda_repo_key_fingerprint: {fingerprint}\n" \
        in stdout
    # a rebuild reuses the bundle key, so the fleet file's fingerprint stays valid
    assert main(["bundle", str(fleet), "-o", str(out)]) == 0
    assert key.read_bytes() == (out / "keys" / "bundle.pub").read_bytes()
    assert fingerprint in capsys.readouterr().out


def test_no_download_writes_only_the_manifest(standin_repo: tuple[Path, str], tmp_path: Path) -> None:
    _, url = standin_repo
    out = tmp_path / "bundle"
    assert main(["bundle", str(write_fleet(tmp_path, url)), "-o", str(out), "--no-download"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert {p["name"] for p in manifest["oses"]["debian12"]["packages"]} >= {"nvidia-driver-570", "libnccl2"}


def test_missing_driver_version_exits_2_naming_the_setting(standin_repo: tuple[Path, str], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _, url = standin_repo
    out = tmp_path / "bundle"
    fleet = write_fleet(tmp_path, url, driver={"branch": "570", "version": "570.999.01", "flavour": "proprietary"})
    assert main(["bundle", str(fleet), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "debian12: nvidia-driver-570 (driver.version=570.999.01): no nvidia-driver-570 version matches" in err
    assert "570.172.08-1" in err  # the versions on offer
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["missing"][0]["setting"] == "driver.version"
    assert not list(out.glob("debian12/*.deb"))  # nothing downloaded


def test_unreachable_repository_exits_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bundle", str(write_fleet(tmp_path, "http://127.0.0.1:9/")), "-o", str(tmp_path / "b")]) == 4
    assert "cannot read the repository index: http://127.0.0.1:9/Packages.gz" in capsys.readouterr().err


def test_mirror_credentials_never_reach_the_output(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A mirror URL with a password ({env: NAME}) that cannot be read: the error names the URL, not the secret."""
    secret = "MirrorSecret77"
    monkeypatch.setenv("GPUPROV_TEST_MIRROR", f"http://user:{secret}@127.0.0.1:9/x/")
    fleet = write_fleet(tmp_path, "unused", mirrors={"cuda_repo_url": {"env": "GPUPROV_TEST_MIRROR"}})
    assert main(["bundle", str(fleet), "-o", str(tmp_path / "out")]) == 4
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    assert "http://user:***@127.0.0.1:9/x/" in captured.err


def test_relative_output_directory_is_signed(standin_repo: tuple[Path, str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``-o out`` relative to the working directory: gpg signs from inside each repository directory, so a
    relative key home would not be found there (break-it F7)."""
    _, url = standin_repo
    fleet = write_fleet(tmp_path, url)
    monkeypatch.chdir(tmp_path)
    assert main(["bundle", str(fleet), "-o", "relative-out"]) == 0
    assert (tmp_path / "relative-out" / "debian12" / "InRelease").read_text(encoding="utf-8").startswith(
        "-----BEGIN PGP SIGNED MESSAGE-----")


def test_malformed_mirror_url_exits_2_without_the_password(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "MirrorSecret88"
    monkeypatch.setenv("GPUPROV_TEST_MIRROR", f"http://user:{secret}@[::1/x/")
    fleet = write_fleet(tmp_path, "unused", mirrors={"cuda_repo_url": {"env": "GPUPROV_TEST_MIRROR"}})
    assert main(["bundle", str(fleet), "-o", str(tmp_path / "out"), "--no-download"]) == 2
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    assert "mirrors.cuda_repo_url" in captured.err and "not a valid URL" in captured.err
