"""`gpuprov validate` on cuda.method runfile and cudnn.method archive: what each needs, and that NVIDIA's file
names agree with cuda.version and cudnn.version; the role variables they render to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet import Fleet
from gpuprov.fleet.loader import load_text
from gpuprov.fleet.validate import validate_loaded
from gpuprov.render import flatten
from gpuprov.rolevars import role_variables

SHA = "ab" * 32
RUNFILE = "https://mirror.example.com/nv/cuda_12.8.1_570.124.06_linux.run"
ARCHIVE = "https://mirror.example.com/nv/cudnn-linux-x86_64-9.10.2.21_cuda12-archive.tar.xz"


def _validate(cuda: dict[str, Any], cudnn: dict[str, Any]) -> Fleet:
    settings = {"os": "debian12", "gpus": {"model": "H200", "count": 8}, "cuda": cuda, "cudnn": cudnn}
    text = yaml.safe_dump({"version": 1, "settings": settings, "hosts": {"gpu01": {"address": "10.0.0.11"}}})
    return validate_loaded(load_text(text, "m.yml"), Path("m.yml"))


def _problems(cuda: dict[str, Any], cudnn: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(FleetValidationError) as info:
        _validate(cuda, cudnn)
    return {p.path: str(p) for p in info.value.problems}


def _runfile(**extra: Any) -> dict[str, Any]:
    return {"version": "12.8.1", "method": "runfile", "runfile_url": RUNFILE, "runfile_sha256": SHA, **extra}


def _archive(**extra: Any) -> dict[str, Any]:
    return {"version": "9.10.2", "method": "archive", "archive_url": ARCHIVE, "archive_sha256": SHA, **extra}


def test_runfile_and_archive_validate_and_render_to_the_role_variables() -> None:
    fleet = _validate(_runfile(), _archive())
    settings = fleet.hosts["gpu01"].settings
    roles = role_variables(flatten(settings))
    assert {k: roles[k] for k in roles if k.startswith(("cuda_", "cudnn_"))} == {
        "cuda_version": "12.8.1", "cuda_method": "runfile", "cuda_runfile_url": RUNFILE, "cuda_runfile_sha256": SHA,
        "cudnn_version": "9.10.2", "cudnn_cuda_version": "12.8.1", "cudnn_method": "archive",
        "cudnn_archive_url": ARCHIVE, "cudnn_archive_sha256": SHA}


def test_packages_stay_the_default_method() -> None:
    settings = _validate({"version": "12.8"}, {"version": "9.10.2"}).hosts["gpu01"].settings
    assert settings["cuda"]["method"] == settings["cudnn"]["method"] == "cuda-repo"


def test_env_urls_are_accepted_unread() -> None:
    fleet = _validate(_runfile(runfile_url={"env": "CUDA_RUNFILE_URL"}), _archive(archive_url={"env": "CUDNN_URL"}))
    assert fleet.hosts["gpu01"].settings["cuda"]["runfile_url"] == {"env": "CUDA_RUNFILE_URL"}


def test_missing_url_and_checksum_are_named() -> None:
    problems = _problems({"version": "12.8.1", "method": "runfile"}, {"version": "9.10.2", "method": "archive"})
    assert "cuda method runfile needs cuda.runfile_url" in problems["settings.cuda.runfile_url"]
    assert "sha256sum cuda_<version>_<driver>_linux.run" in problems["settings.cuda.runfile_sha256"]
    assert "cudnn method archive needs cudnn.archive_url" in problems["settings.cudnn.archive_url"]
    assert "cudnn method archive needs cudnn.archive_sha256" in problems["settings.cudnn.archive_sha256"]


def test_runfile_needs_the_exact_release() -> None:
    problems = _problems(_runfile(version="12.8"), {"version": None})
    assert "a runfile installs one exact release, not CUDA 12.8" in problems["settings.cuda.version"]
    assert '"12.8.1"' in problems["settings.cuda.version"]


def test_runfile_of_another_release_is_refused() -> None:
    problems = _problems(_runfile(version="12.8.0"), {"version": None})
    text = problems["settings.cuda.runfile_url"]
    assert "cuda_12.8.1_570.124.06_linux.run holds CUDA 12.8.1, but cuda.version is 12.8.0" in text
    assert 'cuda.version: "12.8.1"' in text


def test_archive_for_another_cuda_major_is_refused() -> None:
    url = ARCHIVE.replace("_cuda12-", "_cuda13-")
    problems = _problems(_runfile(), _archive(archive_url=url))
    text = problems["settings.cudnn.archive_url"]
    assert "is built for CUDA 13, but cuda.version is 12.8.1" in text
    assert "_cuda12-archive build of cuDNN 9.10.2" in text


def test_archive_of_another_cudnn_is_refused() -> None:
    problems = _problems(_runfile(), _archive(version="9.8.0"))
    assert "holds cuDNN 9.10.2.21, but cudnn.version is 9.8.0" in problems["settings.cudnn.archive_url"]


def test_archive_not_named_as_nvidia_names_it_is_refused() -> None:
    problems = _problems(_runfile(), _archive(archive_url="https://mirror.example.com/cudnn.tar.xz"))
    text = problems["settings.cudnn.archive_url"]
    assert "cudnn.tar.xz is not named like NVIDIA's cuDNN archive" in text
    assert "cudnn-linux-x86_64-<version>_cuda<major>-archive.tar.xz" in text


def test_archive_url_of_no_file_says_so() -> None:
    problems = _problems(_runfile(), _archive(archive_url="https://mirror.example.com/cudnn/"))
    assert "the URL does not end in a file named like NVIDIA's cuDNN archive" in problems["settings.cudnn.archive_url"]


def test_file_settings_without_their_method_are_refused() -> None:
    problems = _problems({"version": "12.8", "runfile_url": RUNFILE}, {"version": "9.10.2", "archive_sha256": SHA})
    assert "cuda.runfile_url is set but cuda.method is cuda-repo" in problems["settings.cuda.runfile_url"]
    assert "set cuda.method: runfile" in problems["settings.cuda.runfile_url"]
    assert "cudnn.archive_sha256 is set but cudnn.method is cuda-repo" in problems["settings.cudnn.archive_sha256"]


def test_bad_checksum_and_method_are_schema_errors() -> None:
    problems = _problems(_runfile(runfile_sha256="abc", method="tarball"), {"version": None})
    assert "not a SHA-256 checksum" in problems["settings.cuda.runfile_sha256"]
    assert "settings.cuda.method" in problems
