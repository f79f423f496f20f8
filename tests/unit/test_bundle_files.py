"""``gpuprov bundle`` with NVIDIA's files: the CUDA runfile and the cuDNN archive are carried in DIR/files/, checked
against the fleet's sha256, and left out of the package set; the printed settings point the hosts at them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprov import bundle
from gpuprov.bundle_files import plan_files
from gpuprov.cli.__main__ import main
from gpuprov.fleet import load_fleet
from tests.http_serve import serve
from tests.unit.test_bundle import standin_repo, versions, write_fleet

__all__ = ["standin_repo"]  # the session fixture, shared with tests/unit/test_bundle.py

RUNFILE = "cuda_12.8.1_570.124.06_linux.run"
ARCHIVE = "cudnn-linux-x86_64-9.8.0.87_cuda12-archive.tar.xz"


@pytest.fixture()
def nvidia_files(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A directory with a runfile and an archive (their content stands for NVIDIA's), served on 127.0.0.1: its URL
    and each file's sha256."""
    folder = tmp_path / "served"
    folder.mkdir()
    sums = {}
    for name in (RUNFILE, ARCHIVE):
        data = f"stand-in {name}\n".encode()
        (folder / name).write_bytes(data)
        sums[name] = hashlib.sha256(data).hexdigest()
    for url in serve(folder):
        yield url, sums


def _fleet(tmp_path: Path, repo: str, files: str, sums: dict[str, str]) -> Path:
    return write_fleet(
        tmp_path, repo,
        cuda={"version": "12.8.1", "method": "runfile", "runfile_url": files + RUNFILE,
              "runfile_sha256": sums[RUNFILE]},
        cudnn={"version": "9.8.0", "method": "archive", "archive_url": files + ARCHIVE,
               "archive_sha256": sums[ARCHIVE]})


def test_files_are_planned_and_their_packages_left_out(standin_repo: tuple[Path, str], tmp_path: Path,
                                                       nvidia_files: tuple[str, dict[str, str]]) -> None:
    url, sums = nvidia_files
    manifest = bundle.plan(load_fleet(_fleet(tmp_path, standin_repo[1], url, sums)))
    assert manifest["files"] == [
        {"name": RUNFILE, "url": url + RUNFILE, "sha256": sums[RUNFILE], "setting": "cuda.runfile_url",
         "hosts": ["gpu01"]},
        {"name": ARCHIVE, "url": url + ARCHIVE, "sha256": sums[ARCHIVE], "setting": "cudnn.archive_url",
         "hosts": ["gpu01"]},
    ]
    got = versions(manifest)
    assert not [name for name in got if name.startswith(("cuda-", "libcudnn"))]
    assert got["libnccl2"] == "2.26.2-1+cuda12.8"  # NCCL still comes from the repository, for the runfile's CUDA
    assert manifest["missing"] == []


def test_download_carries_the_files_and_prints_their_urls(standin_repo: tuple[Path, str], tmp_path: Path,
                                                          nvidia_files: tuple[str, dict[str, str]],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    url, sums = nvidia_files
    out = tmp_path / "bundle"
    fleet = _fleet(tmp_path, standin_repo[1], url, sums)
    assert main(["bundle", str(fleet), "-o", str(out), "--base-url", "http://mirror.invalid/b/"]) == 0
    stdout = capsys.readouterr().out
    for name, digest in sums.items():
        assert hashlib.sha256((out / "files" / name).read_bytes()).hexdigest() == digest
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert [f["size"] for f in manifest["files"]] == [(out / "files" / f["name"]).stat().st_size
                                                      for f in manifest["files"]]
    assert f"cuda:\n  runfile_url: http://mirror.invalid/b/files/{RUNFILE}\n" in stdout
    assert f"cudnn:\n  archive_url: http://mirror.invalid/b/files/{ARCHIVE}\n" in stdout


def test_a_file_whose_sha256_differs_is_refused(standin_repo: tuple[Path, str], tmp_path: Path,
                                                nvidia_files: tuple[str, dict[str, str]],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    url, sums = nvidia_files
    out = tmp_path / "bundle"
    fleet = _fleet(tmp_path, standin_repo[1], url, dict(sums, **{ARCHIVE: "0" * 64}))
    assert main(["bundle", str(fleet), "-o", str(out)]) == 2
    assert f"is not the cudnn sha256 the fleet pins ({'0' * 64}); refused" in capsys.readouterr().err
    assert not (out / "files" / ARCHIVE).exists()


def test_credentials_in_an_env_url_are_not_recorded(standin_repo: tuple[Path, str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPUPROV_TEST_RUNFILE_URL", f"https://site:s3cret@mirror.invalid/nv/{RUNFILE}")
    fleet = write_fleet(tmp_path, standin_repo[1], cudnn={"version": None},
                        cuda={"version": "12.8.1", "method": "runfile", "runfile_sha256": "a" * 64,
                              "runfile_url": {"env": "GPUPROV_TEST_RUNFILE_URL"}})
    (entry,) = plan_files(load_fleet(fleet))
    assert entry["url"] == f"https://site:***@mirror.invalid/nv/{RUNFILE}"
    monkeypatch.delenv("GPUPROV_TEST_RUNFILE_URL")
    assert main(["bundle", str(fleet), "-o", str(tmp_path / "b"), "--no-download"]) == 2
    assert "cuda.runfile_url names environment variable GPUPROV_TEST_RUNFILE_URL, which is unset" in \
        capsys.readouterr().err
