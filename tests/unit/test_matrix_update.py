"""Tests for ``gpuprov matrix update`` (gpuprov.matrix_index, gpuprov.matrix_update, gpuprov.cli.matrix_update).

The index comes from the lab's stand-in CUDA repository code (gpuprov.lab.standin): NVIDIA's package shapes,
``cuda-runtime-X-Y`` depending on ``cuda-drivers (>= <driver>)``, indexed by dpkg-scanpackages.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprov.cli.__main__ import main
from gpuprov.cli.matrix_update import cited_source
from gpuprov.lab.standin.catalogue import DEBIAN_REVISION, cuda_metas, driver_packages, meta
from gpuprov.lab.standin.deb import PackageSpec, build_deb
from gpuprov.lab.standin.repo import index
from gpuprov.lab.standin.unbranched import pinning_package
from gpuprov.matrix import branch_of, load_matrix, matrix_from_text
from gpuprov.matrix_index import index_facts, read_index
from gpuprov.matrix_update import BEGIN, END, anchors_of, render_row
from tests.http_serve import serve

MATRIX = Path(__file__).resolve().parents[2] / "plugins" / "plugin_utils" / "matrix.yml"
#: The CUDA rows the stand-in index is built from (their GA releases), and a later update of one of them.
ROWS = ("12.8", "13.0", "13.1", "13.2")
UPDATE = ("13.0", "13.0.2-1", "580.95.05")


def release(cuda: str, package_version: str, driver: str) -> list[PackageSpec]:
    """What NVIDIA's repository holds for one toolkit release: the cuda-toolkit-X-Y meta, the cuda ->
    cuda-runtime-X-Y -> cuda-drivers chain and cuda-drivers-<branch> (the rest of the driver set is left out: the
    update reads no other driver package, and each .deb costs time)."""
    branch = branch_of(driver)
    drivers = [s for s in driver_packages(branch, driver, DEBIAN_REVISION, flavours=("",))
               if s.name == f"cuda-drivers-{branch}"]
    return [meta(f"cuda-toolkit-{cuda.replace('.', '-')}", package_version, ()),
            *cuda_metas(cuda, package_version, branch, driver, DEBIAN_REVISION), *drivers]


def build(repo: Path, specs: list[PackageSpec]) -> Path:
    for spec in specs:
        build_deb(spec, repo)
    index(repo)
    return repo / "Packages"


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in debian12 repository with the GA releases of :data:`ROWS` at the matrix's drivers, and 13.0.2."""
    m = load_matrix()
    specs = [spec for cuda in ROWS for spec in release(cuda, f"{cuda}.0-1", m.cuda[cuda].driver)]
    return build(tmp_path_factory.mktemp("standin"), specs + release(*UPDATE))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["matrix", "update", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def copy(tmp_path: Path, text: str | None = None) -> Path:
    path = tmp_path / "matrix.yml"
    path.write_text(MATRIX.read_text() if text is None else text)
    return path


def test_the_standin_index_reproduces_the_matrix_rows(standin: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    facts = index_facts(read_index(str(standin)))
    m = load_matrix()
    assert {v: (t.driver, t.package) for v, t in facts.toolkits.items()} == {
        v: (m.cuda[v].driver, f"{v}.0-1") for v in ROWS}  # the GA release, not 13.0.2 with 580.95.05
    assert facts.branches == ("570", "580", "590", "595")
    path = copy(tmp_path)
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(path))
    assert code == 0
    assert [f"CUDA {v}: agrees" for v in ROWS] == re.findall(r"CUDA [\d.]+: .*", out)
    assert "nothing to change" in out and path.read_text() == MATRIX.read_text()


def test_a_changed_and_a_missing_row_are_shown_and_written(standin: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    text = MATRIX.read_text()
    text = text.replace('driver: "590.44.01"', 'driver: "590.40.00"')
    text = re.sub(r'\n  - \{version: "13\.2",[^\n]*', "", text)
    path = copy(tmp_path, text)
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(path))
    assert code == 0 and "CUDA 13.1: changed (was 590.40.00)" in out and "CUDA 13.2: added" in out
    assert '-  - {version: "13.1", driver: "590.40.00"' in out
    assert ('+  - {version: "13.2", driver: "595.45.04", branch: "595", verified: true, source: *repos}' in out)
    assert path.read_text() == text and "run again with --write" in out
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(path), "--write")
    assert code == 0 and f"wrote {path}" in out
    written = path.read_text()
    m = matrix_from_text(written)
    assert (m.cuda["13.1"].driver, m.cuda["13.1"].verified) == ("590.44.01", True)
    assert m.cuda["13.1"].source == "https://developer.download.nvidia.com/compute/cuda/repos/"
    assert m.cuda["13.2"].driver == "595.45.04"
    unchanged = [line for line in written.splitlines() if "13.1" not in line and "13.2" not in line]
    assert unchanged == [line for line in MATRIX.read_text().splitlines() if "13.1" not in line
                         and "13.2" not in line]  # every comment and every other row as it was
    assert "# runfile name cuda_12.4.0_550.54.14" in written


def test_the_os_row_follows_the_index(standin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = copy(tmp_path)
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(path), "--os", "debian12", "--write")
    assert code == 0
    assert 'debian12: cuda_repo_branches changed from ["535", "545"' in out
    m = matrix_from_text(path.read_text())
    assert m.os["debian12"].cuda_repo_branches == ("570", "580", "590", "595")
    assert (m.os["debian12"].cuda_first, m.os["debian12"].cuda_last) == ("12.8", "13.2")
    assert m.os["ubuntu2404"] == load_matrix().os["ubuntu2404"]
    assert "distro_branches: [\"535\"]               # bookworm non-free" in path.read_text()
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(path), "--os", "debian99")
    assert code == 2 and "--os debian99: the matrix has no such OS - use one of ubuntu2004" in out


def test_updates_and_toolkits_without_a_driver_are_not_checked(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    repo = build(tmp_path / "repo", [*release("13.0", "13.0.1-1", "580.82.07"),
                                     meta("cuda-toolkit-13-3", "13.3.0-1", ())])
    code, out = run(capsys, "--packages", str(repo), "--matrix", str(copy(tmp_path)))
    assert code == 0
    assert "CUDA 13.0: not checked: the index starts at 13.0.1-1, an update, not the GA release" in out
    assert "CUDA 13.3: not checked: no cuda-runtime-13-3 package of 13.3.0-1 names a driver" in out
    assert "not in driver_branches" not in out  # 580 is a branch the matrix knows


def test_every_row_renders_as_written() -> None:
    text = MATRIX.read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].splitlines()[1:-1]
    anchors = anchors_of(text)
    m = load_matrix()
    for line in block:
        version = re.search(r'version: "([\d.]+)"', line)[1]  # type: ignore[index]
        row = m.cuda[version]
        rendered = render_row("  ", {"version": row.version, "driver": row.driver, "branch": row.branch,
                                     "verified": row.verified, "source": row.source}, anchors)
        assert line.split("  #")[0] == rendered


@pytest.fixture
def served(standin: Path) -> Iterator[str]:
    yield from serve(standin.parent)


@pytest.mark.parametrize("name", ["", "Packages", "Packages.gz"])
def test_a_mirror_url_is_read(served: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "--packages", served + name, "--matrix", str(copy(tmp_path)))
    assert code == 0 and "CUDA 13.2: agrees" in out


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read it"),
        (b"\x00\x01\xff binary", "not a Debian Packages index (not UTF-8 text)"),
        (b"\x1f\x8b\x08 broken gzip", "a broken gzip file"),
        (b"just: yaml\nnot: an index\n", "paragraph 1 has no Package and Version fields"),
        (b"", "it lists no package"),
        (b"Package: foo\nVersion: 1.0\nArchitecture: amd64\n", "no CUDA toolkit packages"),
        (b"Package: cuda-toolkit-13-1\nVersion: !!notaversion\n", "cuda-toolkit-13-1: Invalid version string"),
        (b"Package: cuda-runtime-13-1\nVersion: 13.1.0-1\nDepends: cuda-drivers (>= :bad)\n",
         "cuda-runtime-13-1: Invalid version string ':bad'"),
    ],
)
def test_bad_input_is_refused_with_exit_2(content: bytes | None, says: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    index_file = tmp_path / "Packages"
    if content is not None:
        index_file.write_bytes(content)
    code, out = run(capsys, "--packages", str(index_file), "--matrix", str(copy(tmp_path)))
    assert code == 2 and says in out and "Traceback" not in out


@pytest.mark.parametrize("url", ["http://user:s3cret@127.0.0.1:9/Packages", "http://user:s3cret@127.0.0.1:9/repo/"])
def test_a_network_error_is_exit_2_without_the_password(url: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "--packages", url, "--matrix", str(copy(tmp_path)))
    assert code == 2 and "check the URL and the network" in out
    assert "s3cret" not in out and "user:***@127.0.0.1:9" in out


def test_bad_matrix_file_and_source_are_refused(standin: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    no_markers = copy(tmp_path, MATRIX.read_text().replace(BEGIN, "# begin"))
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(no_markers))
    assert code == 2 and "needs one" in out
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(copy(tmp_path, "cuda: [\n" + BEGIN)))
    assert code == 2 and "not valid YAML" in out
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(tmp_path / "none.yml"))
    assert code == 2 and "--matrix" in out and "cannot read it" in out
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(copy(tmp_path)), "--source", "http://x/")
    assert code == 2 and "public https URL" in out
    matrix = copy(tmp_path)
    before = matrix.read_text()
    for source in ("https://mirror.example/x/?token=S3cret", "https://u:S3cret@mirror.example/x/",
                   "https://mirror.example/x/#S3cret"):
        code, out = run(capsys, "--packages", str(standin), "--matrix", str(matrix), "--source", source, "--write")
        assert code == 2 and "without credentials, query or fragment" in out and "S3cret" not in out
    assert matrix.read_text() == before
    no_os = copy(tmp_path, before.replace("\nos:\n", "\noperating_systems:\n"))
    code, out = run(capsys, "--packages", str(standin), "--matrix", str(no_os), "--os", "debian12")
    assert code == 2 and "the matrix has no os section" in out and "Traceback" not in out


@pytest.mark.parametrize(
    ("packages", "os_name", "cited"),
    [
        ("https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/Packages.gz", None,
         "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"),
        ("https://mirror.example/cuda/ubuntu2404/x86_64/", "ubuntu2404",
         "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"),
        ("https://user:pw@mirror.example/cuda/Packages", None, "https://developer.download.nvidia.com/compute/cuda/repos/"),
        ("/srv/Packages", None, "https://developer.download.nvidia.com/compute/cuda/repos/"),
    ],
)
def test_rows_cite_nvidia_never_a_mirror(packages: str, os_name: str | None, cited: str) -> None:
    assert cited_source(None, packages, os_name) == cited
    assert cited_source("https://example.org/x", packages, os_name) == "https://example.org/x"


def test_a_truncated_index_behind_a_folder_url_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mirror folder whose Packages.gz is cut short (and no Packages beside it): a usage error naming the index,
    not the interrupt exit 130 that an uncaught EOFError became."""
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "Packages.gz").write_bytes(gzip.compress(b"Package: cuda-toolkit-13-0\nVersion: 13.0.0-1\n" * 50)[:40])
    for url in serve(folder):
        code, out = run(capsys, "--packages", url, "--matrix", str(copy(tmp_path)))
        assert code == 2 and "Packages.gz" in out and "Traceback" not in out


def test_branches_from_r590_are_read_from_the_pinning_packages(tmp_path: Path) -> None:
    """From R590 NVIDIA's index has no cuda-drivers-<branch>: nvidia-driver-pinning-<branch> names the branch."""
    specs = [meta("cuda-toolkit-13-2", "13.2.0-1", ()), pinning_package("610", "610.43.02-1"),
             pinning_package("580", "580.95.05-1")]
    facts = index_facts(read_index(str(build(tmp_path, specs))))
    assert facts.branches == ("580", "610")
