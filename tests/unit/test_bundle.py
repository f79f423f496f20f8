"""Tests for gpuprov.bundle against a signed stand-in CUDA repository served on 127.0.0.1.

The repository holds two 570 driver releases, a 580 one, cuda-toolkit-12-8 with its nvcc/cudart, NCCL 2.26.2
built for CUDA 12.2, 12.8 and 12.9, cuDNN 9.8.0 for CUDA 12 and DCGM 3.3.5, so each test can tell the version
the fleet asks for from its neighbours.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from gpuprov import bundle, mirrorfetch
from gpuprov.exceptions import GpuprovError
from gpuprov.fleet import load_fleet
from gpuprov.lab.standin import PackageSpec, build_repository
from gpuprov.lab.standin.catalogue import DEBIAN_REVISION, driver_packages
from gpuprov.lab.standin.dcgm import dcgm_package
from gpuprov.resources import collections_path
from gpuprov.rolevars import with_role_variables
from tests.http_serve import QuietHandler, serve

ROOT = Path(__file__).resolve().parents[2]


def toolkit_specs() -> list[PackageSpec]:
    """cuda-toolkit-12-8 -> cuda-nvcc-12-8 (>= 12.8.93), cuda-cudart-12-8; NCCL and cuDNN builds."""
    specs = [
        PackageSpec(name="cuda-toolkit-12-8", version="12.8.1-1", architecture="amd64",
                    depends=("cuda-nvcc-12-8 (>= 12.8.93)", "cuda-cudart-12-8 (>= 12.8.90)", "libc6 (>= 2.17)")),
        PackageSpec(name="cuda-nvcc-12-8", version="12.8.93-1", architecture="amd64"),
        PackageSpec(name="cuda-nvcc-12-8", version="12.8.61-1", architecture="amd64"),
        PackageSpec(name="cuda-cudart-12-8", version="12.8.90-1", architecture="amd64"),
    ]
    for cuda in ("12.2", "12.8", "12.9"):
        pv = f"2.26.2-1+cuda{cuda}"
        specs += [PackageSpec(name="libnccl2", version=pv, architecture="amd64"),
                  PackageSpec(name="libnccl-dev", version=pv, architecture="amd64", depends=(f"libnccl2 (= {pv})",))]
    specs += [PackageSpec(name="libcudnn9-cuda-12", version="9.8.0.87-1", architecture="amd64"),
              PackageSpec(name="libcudnn9-dev-cuda-12", version="9.8.0.87-1", architecture="amd64",
                          depends=("libcudnn9-cuda-12 (= 9.8.0.87-1)",))]
    return specs


def repo_specs() -> list[PackageSpec]:
    """The whole stand-in CUDA repository of these tests (debian12 revisions)."""
    specs = driver_packages("570", "570.133.20", DEBIAN_REVISION, flavours=("", "-open"))
    specs += driver_packages("570", "570.172.08", DEBIAN_REVISION, flavours=("",))
    specs += driver_packages("580", "580.65.06", DEBIAN_REVISION, flavours=("",))
    return specs + toolkit_specs() + [dcgm_package("3.3.5")]



@pytest.fixture(scope="session")
def standin_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The built stand-in repository and the URL it is served at."""
    path = tmp_path_factory.mktemp("bundle-repo") / "repo"
    build_repository(repo_specs(), path)
    yield from ((path, url) for url in serve(path))


def write_fleet(directory: Path, url: str, **settings: Any) -> Path:
    """A one-host debian12 H200 fleet pointed at ``url``; ``settings`` override sections."""
    base: dict[str, Any] = {
        "os": "debian12", "gpus": {"model": "H200", "count": 8, "nvswitch": True},
        "driver": {"branch": "570", "version": "570.133.20", "flavour": "proprietary"}, "cuda": {"version": "12.8"},
        "nccl": {"version": "2.26.2"}, "cudnn": {"version": "9.8.0"}, "container_runtime": "none",
        "monitoring": {"enabled": True, "dcgm_version": "3.3.5"}, "mirrors": {"cuda_repo_url": url},
    }
    base.update(settings)
    path = directory / "fleet.yml"
    path.write_text(yaml.safe_dump({"version": 1, "settings": base, "hosts": {"gpu01": {"address": "10.0.0.11"}}}),
                    encoding="utf-8")
    return path


def versions(manifest: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["version"] for p in manifest["oses"]["debian12"]["packages"]}


def test_closure_holds_exact_versions_and_dependencies(standin_repo: tuple[Path, str], tmp_path: Path) -> None:
    _, url = standin_repo
    manifest = bundle.plan(load_fleet(write_fleet(tmp_path, url)))
    got = versions(manifest)
    driver = "570.133.20-1"  # asked for, though 570.172.08-1 is newer
    for name in ("nvidia-driver-570", "nvidia-dkms-570", "libnvidia-compute-570", "nvidia-utils-570",
                 "nvidia-compute-utils-570", "nvidia-fabricmanager-570"):
        assert got.pop(name) == driver, name
    assert got.pop("cuda-toolkit-12-8") == "12.8.1-1"
    assert got.pop("cuda-nvcc-12-8") == "12.8.93-1"  # dependency closure, newest satisfying (>= 12.8.93)
    assert got.pop("cuda-cudart-12-8") == "12.8.90-1"
    assert got.pop("libnccl2") == got.pop("libnccl-dev") == "2.26.2-1+cuda12.8"  # not the newer +cuda12.9
    assert got.pop("libcudnn9-cuda-12") == got.pop("libcudnn9-dev-cuda-12") == "9.8.0.87-1"
    assert got.pop("datacenter-gpu-manager") == "1:3.3.5"
    assert got == {}, f"unexpected packages: {got}"
    assert manifest["missing"] == []
    distro = {d["relation"]: d["needed_by"] for d in manifest["oses"]["debian12"]["from_distribution"]}
    assert distro["dkms"] == ["nvidia-dkms-570"]
    assert distro["libc6 (>= 2.17)"] == ["cuda-toolkit-12-8"]
    assert distro["python3"] == ["datacenter-gpu-manager"]


def test_manifest_entries_match_the_repository_files(standin_repo: tuple[Path, str], tmp_path: Path) -> None:
    repo, url = standin_repo
    manifest = bundle.plan(load_fleet(write_fleet(tmp_path, url)))
    entry = manifest["oses"]["debian12"]
    assert entry["repo_url"] == url and entry["hosts"] == ["gpu01"]
    for package in entry["packages"]:
        data = (repo / package["filename"]).read_bytes()
        assert package["sha256"] == hashlib.sha256(data).hexdigest()
        assert package["size"] == len(data)
        assert package["url"] == url + package["filename"].removeprefix("./")
    wanted = {p["name"]: p["wanted_by"] for p in entry["packages"]}
    assert wanted["nvidia-driver-570"] == ["driver.version=570.133.20"]
    assert wanted["cuda-nvcc-12-8"] == []


def test_open_flavour_without_nvswitch_and_newest_release(standin_repo: tuple[Path, str], tmp_path: Path) -> None:
    _, url = standin_repo
    fleet = write_fleet(tmp_path, url, driver={"branch": "570", "flavour": "open"},
                        gpus={"model": "H200", "count": 8}, cuda={"version": None}, nccl={"version": None},
                        cudnn={"version": None}, monitoring={"enabled": False})
    got = versions(bundle.plan(load_fleet(fleet)))
    # 570.172.08 has no -open build, so the meta picks 570.133.20 and the siblings follow it
    assert got == dict.fromkeys(("nvidia-driver-570-open", "nvidia-dkms-570-open", "libnvidia-compute-570",
                                 "nvidia-utils-570", "nvidia-compute-utils-570"), "570.133.20-1")


def test_missing_version_names_the_setting(standin_repo: tuple[Path, str], tmp_path: Path) -> None:
    _, url = standin_repo
    manifest = bundle.plan(load_fleet(write_fleet(tmp_path, url, nccl={"version": "2.27.3"})))
    assert [(m["package"], m["setting"], m["value"]) for m in manifest["missing"]] == [
        ("libnccl2", "nccl.version", "2.27.3")]
    assert "2.26.2-1+cuda12.9" in manifest["missing"][0]["reason"]  # lists what is offered
    assert "libnccl-dev" not in versions(manifest)


def test_container_runtime_is_reported_not_bundled(standin_repo: tuple[Path, str], tmp_path: Path) -> None:
    _, url = standin_repo
    manifest = bundle.plan(load_fleet(write_fleet(tmp_path, url, container_runtime="docker")))
    not_bundled = manifest["oses"]["debian12"]["not_bundled"]
    assert {(e["package"], e["version"]) for e in not_bundled} == {
        (name, "1.17.8-1") for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                       "libnvidia-container-tools", "libnvidia-container1")}
    assert all(e["host"] == "gpu01" and e["setting"] == "container_runtime" for e in not_bundled)


def test_sha256_mismatch_is_refused(standin_repo: tuple[Path, str], tmp_path: Path) -> None:
    _, url = standin_repo
    manifest = bundle.plan(load_fleet(write_fleet(tmp_path, url, cuda={"version": None}, nccl={"version": None},
                                                  cudnn={"version": None}, monitoring={"enabled": False})))

    def tampered(address: str) -> bytes:
        data = mirrorfetch.fetch(address)
        return data[:-1] + bytes([data[-1] ^ 1]) if "nvidia-utils" in address else data

    with pytest.raises(GpuprovError, match=r"nvidia-utils-570.*does not match the repository index.*refused"):
        bundle.download(manifest, tmp_path / "out", getter=tampered)
    assert not list((tmp_path / "out" / "debian12").glob("nvidia-utils-570*"))


def test_unreachable_repository_is_an_environment_error(tmp_path: Path) -> None:
    with pytest.raises(GpuprovError) as info:
        mirrorfetch.fetch_index("http://127.0.0.1:9/")
    assert info.value.exit_code == 4


@pytest.mark.parametrize(("settings", "expected"), [
    ({"driver": {"branch": "535", "flavour": "proprietary"}, "gpus": {"nvswitch": False}},
     {"nvidia_driver": ["nvidia-driver-535", "nvidia-dkms-535", "libnvidia-compute-535", "nvidia-utils-535",
                        "nvidia-compute-utils-535"],
      "monitoring": ["datacenter-gpu-manager=1:3.3.5"]}),  # the monitoring role's default DCGM
    ({"driver": {"branch": "580", "flavour": "open"}, "gpus": {"nvswitch": True}, "cuda": {"version": "12.4.1"},
      "cudnn": {"version": "9.1.0"}, "nccl": {"version": "2.21.5"}, "monitoring": {"dcgm_version": "4.2.3"}},
     {"nvidia_driver": ["nvidia-driver-580-open", "nvidia-dkms-580-open", "libnvidia-compute-580",
                        "nvidia-utils-580", "nvidia-compute-utils-580", "nvidia-fabricmanager-580"],
      "cuda": ["cuda-toolkit-12-4"], "cudnn": ["libcudnn9-cuda-12", "libcudnn9-dev-cuda-12"],
      "nccl": ["libnccl2", "libnccl-dev"], "monitoring": ["datacenter-gpu-manager-4-core=1:4.2.3-1"]}),
    ({"driver": {"branch": "550"}, "cuda": {"version": "11.8"}, "cudnn": {"version": "8.9.7"},
      "monitoring": {"dcgm_version": "3.3.9"}},
     {"nvidia_driver": ["nvidia-driver-550", "nvidia-dkms-550", "libnvidia-compute-550", "nvidia-utils-550",
                        "nvidia-compute-utils-550"],
      "cuda": ["cuda-toolkit-11-8"], "cudnn": ["libcudnn8", "libcudnn8-dev"],
      "monitoring": ["datacenter-gpu-manager=1:3.3.9"]}),
    # Ubuntu's server builds: the userland takes -server too (the bundle used to fetch the desktop userland)
    ({"driver": {"branch": "570", "flavour": "server"}, "monitoring": {"enabled": False}},
     {"nvidia_driver": ["nvidia-driver-570-server", "nvidia-dkms-570-server", "libnvidia-compute-570-server",
                        "nvidia-utils-570-server", "nvidia-compute-utils-570-server"]}),
    # R590 and later: NVIDIA's unbranched names and the pinning package that chooses the branch
    ({"driver": {"branch": "595", "flavour": "open"}, "gpus": {"nvswitch": True}, "monitoring": {"enabled": False}},
     {"nvidia_driver": ["nvidia-open", "nvidia-dkms-open", "libnvidia-compute", "nvidia-utils",
                        "nvidia-compute-utils", "nvidia-fabricmanager", "nvidia-driver-pinning-595"]}),
    ({"driver": {"branch": "610", "flavour": "proprietary"}, "monitoring": {"enabled": False}},
     {"nvidia_driver": ["cuda-drivers", "nvidia-dkms", "libnvidia-compute", "nvidia-utils", "nvidia-compute-utils",
                        "nvidia-driver-pinning-610"]}),
])
def test_names_match_the_roles_jinja(settings: dict[str, Any], expected: dict[str, list[str]]) -> None:
    """stack_packages gives the names the roles' own vars compute for the same fleet variables (the driver set
    through the collection's naming rule, which both call)."""
    from_roles = role_names(settings)
    assert from_roles == expected  # the roles still compute what this test expects...
    wants, _ = bundle.stack_packages(settings)
    ours = {w.name if not w.name.startswith("datacenter") else f"{w.name}={w.pattern.replace(chr(92), '')}"
            for w in wants}
    assert ours == {n for names in from_roles.values() for n in names}  # ...and so does the bundle


@pytest.mark.parametrize(("section", "version", "cuda", "offered"), [
    ("nccl", "2.26.2", "12.8", ["2.26.2-1+cuda12.8", "2.26.2-1+cuda12.2", "2.26.20-1+cuda12.8", "2.26-1+cuda12.8"]),
    ("nccl", "2.26", "12.8", ["2.26.2-1+cuda12.8", "2.26.5-1+cuda12.9", "2.27.1-1+cuda12.8"]),
    ("cudnn", "9.8.0", "12.8", ["9.8.0.87-1", "9.8.1.2-1", "9.8.0-1"]),
    ("cudnn", "8.9.7", "11.8", ["8.9.7.29-1+cuda11.8", "8.9.7.29-1+cuda12.2", "8.9.70.1-1+cuda11.8"]),
])
def test_version_patterns_match_the_roles_regexes(section: str, version: str, cuda: str,
                                                  offered: list[str]) -> None:
    import re

    role_regex = role_template(section, {f"{section}_version": version, f"{section}_cuda_version": cuda},
                               f"{{{{ __{section}_version_regex | trim }}}}")
    wants, _ = bundle.stack_packages({section: {"version": version}, "cuda": {"version": cuda},
                                      "monitoring": {"enabled": False}, "container_runtime": "none"})
    (ours,) = [w.pattern for w in wants if w.setting == f"{section}.version" and w.same_as is None]
    for candidate in offered:
        assert bool(re.fullmatch(ours, candidate)) == bool(re.fullmatch(role_regex, candidate)), candidate


#: Templates one role expression the way a play does: Ansible's collection loader installed first, so the
#: collection's own filters (gpuprov.gpu.nvidia_driver_packages) resolve. In a process of its own, as
#: ansible-playbook is: the loader must come before any import of ``ansible_collections`` and it patches
#: ``sys.intern``, which torch's compiler refuses.
_TEMPLATE = """
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
role_dir, variables, expression = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
loader = DataLoader()
merged = {}
for layer in ("defaults", "vars"):
    merged.update(loader.load_from_file(f"{role_dir}/{layer}/main.yml", trusted_as_template=True))
merged.update(variables)
print(json.dumps(Templar(loader=loader, variables=merged).template(trust_as_template(expression))))
"""


def role_template(role: str, variables: dict[str, Any], expression: str) -> Any:
    """Template ``expression`` with ``role``'s defaults and vars/main.yml plus ``variables`` (Ansible's Templar);
    fleet variables (``gpuprov_*``) among them reach the role as gpuprov maps them (gpuprov.rolevars)."""
    done = subprocess.run([sys.executable, "-c", _TEMPLATE, str(collections_path()), str(ROOT / "roles" / role),
                           json.dumps(with_role_variables(variables)), expression],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def role_names(settings: dict[str, Any]) -> dict[str, list[str]]:
    """Package names each role computes for fleet ``settings`` (through the rendered gpuprov_* variables)."""
    driver, gpus = settings.get("driver", {}), settings.get("gpus", {})
    out: dict[str, list[str]] = {"nvidia_driver": list(role_template("nvidia_driver", {
        "gpuprov_driver_branch": driver["branch"], "gpuprov_driver_flavour": driver.get("flavour", "auto"),
        "__nvidia_driver_fm_enabled": gpus.get("nvswitch", False)},
        "{{ __nvidia_driver_set + ([__nvidia_driver_pinning] if __nvidia_driver_pinning else []) }}"))}
    cuda = (settings.get("cuda") or {}).get("version")
    if cuda:
        out["cuda"] = list(role_template("cuda", {"gpuprov_cuda_version": cuda}, (
            "{{ __cuda_toolkits | map('replace', '.', '-') | map('regex_replace', '^', 'cuda-toolkit-') | list }}")))
        for lib in ("cudnn", "nccl"):
            version = (settings.get(lib) or {}).get("version")
            if version:
                out[lib] = [str(n).strip() for n in role_template(lib, {
                    f"gpuprov_{lib}_version": version, "gpuprov_cuda_version": cuda,
                    f"__{lib}_cuda_major": cuda.split(".")[0]}, f"{{{{ __{lib}_packages }}}}")]
    monitoring = settings.get("monitoring") or {}
    if monitoring.get("enabled", True):
        given = {"gpuprov_monitoring_dcgm_version": monitoring["dcgm_version"]} if "dcgm_version" in monitoring else {}
        expression = "{{ __monitoring_dcgm_pkg | trim }}={{ __monitoring_dcgm_pkg_version | trim }}"
        out["monitoring"] = [str(role_template("monitoring", given, expression))]
    return out


class _BasicAuth(QuietHandler):
    """Serves its directory only to ``mirror`` with :data:`PASSWORD`; records each request's path and headers."""

    expected = ""
    seen: ClassVar[list[tuple[str, str]]] = []  # one server per test, reset there

    def do_GET(self) -> None:
        type(self).seen.append((self.path, str(self.headers)))
        if self.headers.get("Authorization") != f"Basic {self.expected}":
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="mirror"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


def serve_with_basic_auth(directory: Path, user: str, password: str) -> Iterator[str]:
    """Like :func:`serve`, but every request needs HTTP basic auth as ``user``/``password``."""
    _BasicAuth.expected = base64.b64encode(f"{user}:{password}".encode()).decode()
    _BasicAuth.seen = []
    yield from serve(directory, _BasicAuth)


def test_credentialed_mirror_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``user:password@`` in a mirror URL goes as basic auth (percent-decoded), never in the request line."""
    password = "s3cr@t-" + os.urandom(4).hex()  # an '@' in it: percent-encoded in the URL
    (tmp_path / "tiny.txt").write_bytes(b"tiny\n")
    caplog.set_level(logging.DEBUG, logger="gpuprov")
    for url in serve_with_basic_auth(tmp_path, "mirror", password):
        credentialed = url.replace("://", f"://mirror:{urllib.parse.quote(password, safe='')}@")
        assert mirrorfetch.fetch(credentialed + "tiny.txt") == b"tiny\n"
        assert _BasicAuth.seen[0][0] == "/tiny.txt"
        with pytest.raises(urllib.error.HTTPError, match="401"):  # the server does check
            mirrorfetch.fetch(url.replace("://", "://mirror:wrong@") + "tiny.txt")
    assert all(password not in text and urllib.parse.quote(password, safe="") not in text
               for text in [r.getMessage() for r in caplog.records])


def test_credentialed_mirror_bundle_manifest_is_redacted(standin_repo: tuple[Path, str], tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """plan + download through a mirror that needs basic auth: the packages arrive, and neither the manifest
    (in memory and on disk), the log nor an error message holds the password."""
    repo, _ = standin_repo
    password = "bundle-" + os.urandom(6).hex()
    caplog.set_level(logging.DEBUG, logger="gpuprov")
    for url in serve_with_basic_auth(repo, "mirror", password):
        # the fleet file names credentials only as {env: NAME}
        monkeypatch.setenv("GPUPROV_TEST_MIRROR", url.replace("://", f"://mirror:{password}@"))
        fleet = write_fleet(tmp_path, url, cuda={"version": None}, nccl={"version": None}, cudnn={"version": None},
                            monitoring={"enabled": False}, mirrors={"cuda_repo_url": {"env": "GPUPROV_TEST_MIRROR"}})
        manifest = bundle.plan(load_fleet(fleet))
        path = bundle.write_manifest(manifest, tmp_path / "out")
        bundle.download(manifest, tmp_path / "out")
        entry = manifest["oses"]["debian12"]
        redacted = url.replace("://", "://mirror:***@")
        assert entry["repo_url"] == redacted
        assert all(p["url"].startswith(redacted) for p in entry["packages"])
        debs = sorted(p.name for p in (tmp_path / "out" / "debian12").glob("*.deb"))
        assert debs == sorted(Path(p["filename"]).name for p in entry["packages"]) and debs
        # an error quotes the URL redacted too
        manifest["oses"]["debian12"]["packages"][0]["sha256"] = "0" * 64
        (tmp_path / "out" / "debian12" / Path(entry["packages"][0]["filename"]).name).unlink()
        with pytest.raises(GpuprovError) as info:
            bundle.download(manifest, tmp_path / "out")
        assert "mirror:***@" in info.value.message and password not in info.value.message
    assert password not in path.read_text(encoding="utf-8")
    assert json.loads(path.read_text(encoding="utf-8"))["oses"]["debian12"]["repo_url"] == redacted
    assert all(password not in r.getMessage() for r in caplog.records)
    assert all(password not in request_line for request_line, _ in _BasicAuth.seen)
    assert any(f"Authorization: Basic {_BasicAuth.expected}" in headers for _, headers in _BasicAuth.seen)


def test_unbranched_driver_set_is_bundled_at_a_version_of_its_branch() -> None:
    """From R590 the names carry no branch, so the set is fetched at a version of it (never the repository's newest
    branch), after NVIDIA's pinning package of the branch; an exact driver.version still rules."""
    wants, _ = bundle.stack_packages({"driver": {"branch": "595", "flavour": "open"}, "monitoring": {"enabled": False},
                                      "container_runtime": "none"})
    by_name = {w.name: w for w in wants}
    assert wants[0].name == "nvidia-driver-pinning-595"
    meta = by_name["nvidia-open"]
    assert [v for v in ("595.71.05-1", "1:595.58.03-0ubuntu1", "610.43.02-1", "5950.1-1")
            if re.fullmatch(meta.pattern, v)] == ["595.71.05-1", "1:595.58.03-0ubuntu1"]
    assert by_name["nvidia-dkms-open"].same_as == "nvidia-open"
    exact, _ = bundle.stack_packages({"driver": {"branch": "595", "flavour": "open", "version": "595.58.03"},
                                      "monitoring": {"enabled": False}, "container_runtime": "none"})
    assert {w.name: w.pattern for w in exact}["nvidia-open"] == r"595\.58\.03-.*"


def test_method_distro_bundles_no_driver_from_the_cuda_repository() -> None:
    """The role installs the distribution's own driver then: the bundle says so instead of fetching NVIDIA's."""
    wants, elsewhere = bundle.stack_packages({"driver": {"method": "distro", "branch": "535"}, "os": "debian12"})
    assert not [w.name for w in wants if "nvidia" in w.name]
    assert elsewhere[0] == {"package": "the OS archive's NVIDIA driver", "version": "535", "setting": "driver.method",
                            "reason": "method distro installs the driver from the OS archive, not the CUDA repository"}
