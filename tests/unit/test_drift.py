"""The drift report's comparison (gpuprov.drift.compare) on recorded dpkg-query / NVML / config inputs.

The package lines are dpkg-query's output in the format gpuprov.gpu.deb_packages asks for (``DPKG_QUERY_FORMAT``:
package, architecture, version, dpkg's three-word status), read by the module's own parser; NVML facts come from the
h200x2 capture through the real collector.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import miglayout
from ansible_collections.gpuprov.gpu.plugins.module_utils.deb import installed_versions, parse_dpkg_query
from nvml_fake import FakeNvml
from test_verify import MIG_LGI

from gpuprov import drift, drift_report
from gpuprov.facts import collect_with

DESIRED = {"driver_branch": "580", "driver_version": "580.159.04", "driver_flavour": "open", "nvswitch": True,
           "cuda_version": "12.8", "cudnn_version": "9.10.2", "nccl_version": "2.26.2",
           "container_runtime": "docker", "mig_layout": None, "mig_layouts": {}, "cuda_method": "cuda-repo",
           "cuda_runfile_sha256": "", "cudnn_method": "cuda-repo", "cudnn_archive_sha256": "", "kernel_hold": False}

PACKAGES = "\n".join([
    "linux-image-6.8.0-60-generic\tamd64\t6.8.0-60.63\tinstall ok installed",
    "linux-headers-6.8.0-60-generic\tamd64\t6.8.0-60.63\tinstall ok installed",
    # removed, configuration files left: not installed
    "linux-image-6.8.0-31-generic\tamd64\t6.8.0-31.31\tdeinstall ok config-files",
    "nvidia-driver-580-open\tamd64\t580.159.04-0ubuntu1\thold ok installed",
    "nvidia-dkms-580-open\tamd64\t580.159.04-0ubuntu1\thold ok installed",
    "nvidia-fabricmanager-580\tamd64\t580.159.04-1\tinstall ok installed",
    "cuda-toolkit-12-8\tamd64\t12.8.1-1\tinstall ok installed",
    "libcudnn9-cuda-12\tamd64\t9.10.2.21-1\tinstall ok installed",
    "libnccl2\tamd64\t2.26.2-1+cuda12.8\tinstall ok installed",
    "nvidia-container-toolkit\tamd64\t1.17.8-1\tinstall ok installed",
    "libcudnn8\tamd64\t\tunknown ok not-installed",
])
DAEMON = json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}})



@pytest.fixture(scope="module")
def nvml() -> dict[str, Any]:
    facts: dict[str, Any] = collect_with(FakeNvml())
    # the collector reads the loaded module's version from this machine's /sys; the capture's host had the
    # module NVML reports loaded
    facts["kernel_module_version"] = facts["driver_version"]
    return facts


def _installed_packages(dpkg_text: str) -> dict[str, dict[str, str]]:
    """dpkg-query lines -> the ``versions`` and ``selections`` the drift probe's host_state read publishes."""
    packages = parse_dpkg_query(dpkg_text)
    return {"versions": installed_versions(packages),
            "selections": {name: entry["selection"] for name, entry in packages.items()}}


def _fact(nvml: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A ``verify_drift`` fact; ``installed__packages`` takes dpkg-query lines, the rest as the probe publishes."""
    installed = {"kernel": "6.8.0-60-generic", **_installed_packages(PACKAGES), "nvml": nvml,
                 "files": {"/etc/docker/daemon.json": DAEMON, "/etc/containerd/config.toml": None},
                 "mig_instances": ""}
    fact = {"desired": copy.deepcopy(DESIRED), "installed": installed}
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name == "packages":
            fact[section].update(_installed_packages(value))
        else:
            fact[section][name] = value
    return fact


def test_converged_host_is_in_sync(nvml: dict[str, Any]) -> None:
    result = drift.compare(_fact(nvml))
    assert list(result) == list(drift.COMPONENTS)
    assert {c: e["in_sync"] for c, e in result.items() if not e["in_sync"]} == {}
    assert result["driver"]["desired"]["packages"] == ["nvidia-driver-580-open", "nvidia-dkms-580-open"]
    assert result["kernel"]["installed"]["images"] == ["6.8.0-60-generic"]  # the rc package is not installed


def test_hand_changed_packages_show_as_drift(nvml: dict[str, Any]) -> None:
    """The acceptance case: a package changed by hand on a host (NCCL downgraded, toolkit removed)."""
    changed = PACKAGES.replace("libnccl2\tamd64\t2.26.2-1+cuda12.8", "libnccl2\tamd64\t2.21.5-1+cuda12.4").replace(
        "nvidia-container-toolkit\tamd64\t1.17.8-1\tinstall ok installed",
        "nvidia-container-toolkit\tamd64\t1.17.8-1\tdeinstall ok config-files")
    result = drift.compare(_fact(nvml, installed__packages=changed))
    bad = {c: e["note"] for c, e in result.items() if not e["in_sync"]}
    assert bad == {"nccl": "no libnccl2 package at 2.26.2",
                   "container_toolkit": "nvidia-container-toolkit is not installed"}
    assert result["nccl"]["installed"] == {"libnccl2": "2.21.5-1+cuda12.4"}


def test_driver_drift_by_package_version_and_nvml(nvml: dict[str, Any]) -> None:
    result = drift.compare(_fact(nvml, desired__driver_version="580.95.05"))
    note = result["driver"]["note"]
    assert not result["driver"]["in_sync"]
    assert "nvidia-dkms-580-open, nvidia-driver-580-open not at 580.95.05" in note
    assert "NVML reports driver 580.159.04" in note
    other = drift.compare(_fact(nvml, desired__driver_branch="570", desired__driver_version=None))
    assert other["driver"]["note"] == "nvidia-driver-570-open is not installed; nvidia-dkms-570-open is not installed"


def test_fabric_manager_missing_or_mismatched_on_nvswitch(nvml: dict[str, Any]) -> None:
    without = PACKAGES.replace("nvidia-fabricmanager-580\tamd64\t580.159.04-1\tinstall ok installed\n", "")
    assert "CUDA fails with 802" in drift.compare(_fact(nvml, installed__packages=without))["fabric_manager"]["note"]
    old = PACKAGES.replace("nvidia-fabricmanager-580\tamd64\t580.159.04-1",
                           "nvidia-fabricmanager-580\tamd64\t580.95.05-1")
    assert drift.compare(_fact(nvml, installed__packages=old))["fabric_manager"]["note"] == (
        "nvidia-fabricmanager-580 differ from driver 580.159.04")
    plain = drift.compare(_fact(nvml, installed__packages=without, desired__nvswitch=False))
    assert plain["fabric_manager"]["in_sync"]
    # the installed driver package sets the version (NVML reads the loaded driver: a reboot may be pending)
    newer = PACKAGES.replace("580.159.04", "580.95.05")
    entry = drift.compare(_fact(nvml, installed__packages=newer, desired__driver_version=None))["fabric_manager"]
    assert entry["in_sync"] and entry["desired"]["version"] == "580.95.05"
    # the driver meta removed by hand: the rest of the set (nvidia-dkms) still says which version FM must match
    partial = newer.replace("nvidia-driver-580-open\tamd64\t580.95.05-0ubuntu1\thold ok installed\n", "")
    result = drift.compare(_fact(nvml, installed__packages=partial, desired__driver_version=None))
    assert result["fabric_manager"]["in_sync"] and not result["driver"]["in_sync"]


def test_kernel_without_headers_and_cuda_minor_change(nvml: dict[str, Any]) -> None:
    packages = PACKAGES + "\nlinux-image-6.8.0-62-generic\tamd64\t6.8.0-62.65\tinstall ok installed"
    result = drift.compare(_fact(nvml, installed__packages=packages, desired__cuda_version="12.9"))
    assert result["kernel"]["installed"]["without_headers"] == ["6.8.0-62-generic"]
    assert result["cuda"]["note"] == "cuda-toolkit-12-9 is not installed"


def test_kernel_hold_shows_an_unheld_kernel_meta_as_drift(nvml: dict[str, Any]) -> None:
    metas = PACKAGES + ("\nlinux-generic\tamd64\t6.8.0-60.60\thold ok installed"
                        "\nlinux-image-generic\tamd64\t6.8.0-60.60\thold ok installed"
                        "\nlinux-headers-generic\tamd64\t6.8.0-60.60\tinstall ok installed")
    # kernel.hold false (the default): holds are not compared
    assert drift.compare(_fact(nvml, installed__packages=metas))["kernel"]["in_sync"]
    kernel = drift.compare(_fact(nvml, installed__packages=metas, desired__kernel_hold=True))["kernel"]
    assert not kernel["in_sync"]
    assert kernel["installed"]["unheld_metas"] == ["linux-headers-generic"]
    assert kernel["note"].startswith("kernel.hold is true but linux-headers-generic not held")
    held = metas.replace("linux-headers-generic\tamd64\t6.8.0-60.60\tinstall", "linux-headers-generic\tamd64\t"
                                                                                 "6.8.0-60.60\thold")
    assert drift.compare(_fact(nvml, installed__packages=held, desired__kernel_hold=True))["kernel"]["in_sync"]


def test_runtime_config_docker_and_containerd(nvml: dict[str, Any]) -> None:
    result = drift.compare(_fact(nvml, installed__files={"/etc/docker/daemon.json": "{}"}))
    assert result["runtime_config"]["note"] == "/etc/docker/daemon.json has no nvidia runtime"
    missing = drift.compare(_fact(nvml, installed__files={"/etc/docker/daemon.json": None}))
    assert missing["runtime_config"]["note"] == "/etc/docker/daemon.json is missing"
    toml = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
    containerd = drift.compare(_fact(nvml, desired__container_runtime="containerd",
                                     installed__files={"/etc/containerd/config.toml": toml}))
    assert containerd["runtime_config"]["in_sync"]
    none = drift.compare(_fact(nvml, desired__container_runtime="none", installed__packages=""))
    assert none["container_toolkit"]["in_sync"] and none["runtime_config"]["in_sync"]


def test_mig_layout_compares_mode_and_instances(nvml: dict[str, Any]) -> None:
    assert miglayout.parse_mig_instances(MIG_LGI) == {0: {"3g.71gb": 1, "1g.18gb": 2}}
    layouts = {"mixed": [{"devices": [0], "mig_enabled": True, "mig_devices": {"3g.71gb": 1, "1g.18gb": 2}},
                         {"devices": [1], "mig_enabled": False, "mig_devices": {}}]}
    facts = copy.deepcopy(nvml)
    facts["gpus"][0]["mig"]["current"] = True
    facts["gpus"][1]["mig"]["current"] = False
    ok = drift.compare(_fact(facts, desired__mig_layout="mixed", desired__mig_layouts=layouts,
                             installed__mig_instances=MIG_LGI))
    assert ok["mig"]["in_sync"], ok["mig"]
    lost = drift.compare(_fact(facts, desired__mig_layout="mixed", desired__mig_layouts=layouts,
                               installed__mig_instances=""))  # instances gone after a reboot
    assert lost["mig"]["note"] == "GPU 0: instances none, wanted 2 x 1g.18gb, 1 x 3g.71gb"
    off = drift.compare(_fact(nvml, desired__mig_layout="mixed", desired__mig_layouts=layouts))
    assert "GPU 0: MIG off, wanted on" in off["mig"]["note"]


def test_fleet_drift_lists_drifted_components() -> None:
    report = drift_report.FleetDrift(hosts={"a": {"nccl": {"in_sync": False}, "cuda": {"in_sync": True}},
                                     "b": {"nccl": {"in_sync": True}}})
    assert report.drifted == {"a": ["nccl"]}
    assert report.to_json()["drifted"] == {"a": ["nccl"]}


def test_an_adopted_host_is_in_sync(nvml: dict[str, Any]) -> None:
    """The real H200 host (tests/data/real-h200/site-env.txt): driver 580.159.04 loaded from outside, no driver or
    Fabric Manager package, CUDA 13.0 as cuda-nvcc/cuda-cudart debs without cuda-toolkit-13-0."""
    packages = "\n".join(["cuda-nvcc-13-0\tamd64\t13.0.88-1\tinstall ok installed",
                          "cuda-cudart-13-0\tamd64\t13.0.96-1\tinstall ok installed",
                          "libnccl2\tamd64\t2.28.3-1+cuda13.0\thold ok installed"])
    report = drift.compare(_fact(nvml, installed__packages=packages, desired__driver_version=None,
                                 desired__cuda_version="13.0", desired__cudnn_version=None,
                                 desired__nccl_version=None, desired__container_runtime="none"))
    assert {c: e["in_sync"] for c, e in report.items() if not e["in_sync"]} == {}
    assert report["driver"]["note"].startswith("adopted: the loaded driver 580.159.04 is on branch 580")
    assert report["cuda"]["note"] == "installed in parts (cuda-nvcc-13-0, cuda-cudart-13-0), adopted"
    assert report["fabric_manager"]["note"].startswith("not managed: the driver was adopted")
    # a loaded driver of another branch is drift, not adoption
    other = drift.compare(_fact(nvml, installed__packages=packages, desired__driver_branch="570",
                                desired__driver_version=None))
    assert not other["driver"]["in_sync"]
    # with python3-apt the roles install the packages, so their absence is drift (a fresh lab host)
    with_apt = packages + "\npython3-apt\tamd64\t2.6.0\tinstall ok installed"
    managed = drift.compare(_fact(nvml, installed__packages=with_apt, desired__driver_version=None,
                                  desired__cuda_version="13.0"))
    assert not managed["driver"]["in_sync"] and not managed["cuda"]["in_sync"]
    assert not managed["fabric_manager"]["in_sync"]


def test_driver_packages_differ_from_the_loaded_module(nvml: dict[str, Any]) -> None:
    """No driver version pinned, branch in sync: packages upgraded (or replaced) under the loaded module is
    still driver drift - the host runs another driver than it will after its next boot."""
    upgraded = PACKAGES.replace("580.159.04", "580.95.05")  # driver set and Fabric Manager upgraded together
    result = drift.compare(_fact(nvml, installed__packages=upgraded, desired__driver_version=None))
    assert not result["driver"]["in_sync"]
    assert result["driver"]["note"] == ("the installed driver packages are 580.95.05 but the loaded kernel module "
                                        "is 580.159.04: reboot pending or driver replaced under a loaded module")
    # the other components are not blamed for it
    assert [c for c, e in result.items() if not e["in_sync"]] == ["driver"]
    # NVML fails after a userland upgrade (RM version mismatch); the module's own version still tells
    mismatch = copy.deepcopy(nvml)
    mismatch.update(available=False, error_name="NVML_ERROR_LIB_RM_VERSION_MISMATCH", driver_version=None)
    broken = drift.compare(_fact(mismatch, installed__packages=upgraded, desired__driver_version=None))
    assert "loaded kernel module is 580.159.04" in broken["driver"]["note"]
    # the userland library alone counts as the set (meta and DKMS removed by hand)
    library = "\n".join(["libnvidia-compute-580\tamd64\t580.95.05-0ubuntu1\tinstall ok installed",
                         "python3-apt\tamd64\t2.6.0\tinstall ok installed"])
    lib = drift.compare(_fact(nvml, installed__packages=library, desired__driver_branch="auto",
                              desired__driver_version=None))["driver"]
    assert "installed driver packages are 580.95.05" in lib["note"]
    # packages and module agree, no version pinned: in sync; module not loaded (no reading): nothing to compare
    assert drift.compare(_fact(nvml, desired__driver_version=None))["driver"]["in_sync"]
    unloaded = copy.deepcopy(mismatch)
    unloaded.update(kernel_module_version=None, error_name="NVML_ERROR_DRIVER_NOT_LOADED")
    assert drift.compare(_fact(unloaded, desired__driver_version=None))["driver"]["in_sync"]


def test_driver_set_is_one_constant_for_driver_and_fabric_manager(nvml: dict[str, Any]) -> None:
    """Both entries read the set through drift.DRIVER_SET: the userland library alone still sets the version
    Fabric Manager must match, and the driver entry compares the same version with the loaded module."""
    assert drift.DRIVER_SET == ("nvidia-driver", "nvidia-dkms", "libnvidia-compute", "nvidia-open", "nvidia-headless",
                                "nvidia-headless-no-dkms")
    only_lib = "\n".join(["libnvidia-compute-580-server\tamd64\t580.95.05-0ubuntu1\tinstall ok installed",
                          "nvidia-fabricmanager-580\tamd64\t580.95.05-1\tinstall ok installed",
                          "python3-apt\tamd64\t2.6.0\tinstall ok installed"])
    result = drift.compare(_fact(nvml, installed__packages=only_lib, desired__driver_version=None))
    assert result["fabric_manager"]["in_sync"] and result["fabric_manager"]["desired"]["version"] == "580.95.05"
    assert "installed driver packages are 580.95.05" in result["driver"]["note"]


def test_the_verify_role_publishes_the_desired_keys_drift_reads() -> None:
    """roles/verify/tasks/drift.yml's ``verify_drift.desired`` has exactly :data:`DESIRED`'s keys, the ones
    gpuprov.drift reads (``want.get(KEY)``), each from a verify role variable."""
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    tasks = yaml.safe_load((root / "roles" / "verify" / "tasks" / "drift.yml").read_text(encoding="utf-8"))
    (publish,) = [t for t in tasks if "verify_drift" in (t.get("ansible.builtin.set_fact") or {})]
    desired = publish["ansible.builtin.set_fact"]["verify_drift"]["desired"]
    source = Path(drift.__file__).read_text(encoding="utf-8")
    read = set(re.findall(r'want\.get\("(\w+)"\)', source)) | set(re.findall(r'_library\("(\w+)"', source))
    assert set(desired) == set(DESIRED) == read
    assert all(re.fullmatch(r"\{\{ verify_\w+( \| bool)? \}\}", str(v)) for v in desired.values()), desired


def test_the_probe_publishes_the_installed_keys_drift_reads_and_the_upgrade_marker_the_upgrade_writes() -> None:
    """``verify_drift.installed`` has the keys gpuprov.drift reads (``have.get(KEY)``), and the marker it reads is the
    file playbooks/tasks/upgrade_host.yml leaves while an upgrade is under way."""
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    tasks = yaml.safe_load((root / "roles" / "verify" / "tasks" / "drift.yml").read_text(encoding="utf-8"))
    (publish,) = [t for t in tasks if "verify_drift" in (t.get("ansible.builtin.set_fact") or {})]
    installed = publish["ansible.builtin.set_fact"]["verify_drift"]["installed"]
    source = Path(drift.__file__).read_text(encoding="utf-8")
    assert set(installed) == set(re.findall(r'have\.get\("(\w+)"\)', source))
    verify_vars = yaml.safe_load((root / "roles" / "verify" / "vars" / "main.yml").read_text(encoding="utf-8"))
    upgrade = yaml.safe_load((root / "playbooks" / "tasks" / "upgrade_host.yml").read_text(encoding="utf-8"))
    (names,) = [t for t in upgrade if "__upgrade_marker" in (t.get("ansible.builtin.set_fact") or {})]
    assert verify_vars["__verify_drift_upgrade_marker"] == names["ansible.builtin.set_fact"]["__upgrade_marker"]
    assert verify_vars["__verify_drift_upgrade_marker"] == drift.UPGRADE_MARKER


def _dpkg(*rows: tuple[str, str]) -> str:
    return "\n".join(f"{name}\tamd64\t{version}\tinstall ok installed" for name, version in rows)


UBUNTU_SERVER = (("nvidia-driver-580-server", "580.159.04-0ubuntu0.24.04.1"),
                 ("nvidia-dkms-580-server", "580.159.04-0ubuntu0.24.04.1"),
                 ("libnvidia-compute-580-server", "580.159.04-0ubuntu0.24.04.1"))


@pytest.mark.parametrize(("flavour", "rows", "in_sync"), [
    # method distro on Ubuntu: the archive's -server builds, DKMS or Canonical's precompiled modules
    ("proprietary", UBUNTU_SERVER, True),
    ("auto", UBUNTU_SERVER, True),
    ("open", UBUNTU_SERVER, False),  # the open modules were asked for
    ("open", (("nvidia-driver-580-server-open", "580.159.04-0ubuntu1"),
              ("linux-modules-nvidia-580-server-open-generic", "6.8.0-60.63+1")), True),
    ("auto", (("nvidia-driver-580-open", "580.159.04-1"), ("nvidia-dkms-580-open", "580.159.04-1")), True),
    # method ubuntu-drivers: Ubuntu's headless meta with Canonical's precompiled modules, or with DKMS
    ("proprietary", (("nvidia-headless-no-dkms-580-server", "580.159.04-0ubuntu0.24.04.1"),
                     ("linux-modules-nvidia-580-server-6.8.0-87-generic", "6.8.0-87.88+1")), True),
    ("proprietary", (("nvidia-headless-580-server", "580.159.04-0ubuntu0.24.04.1"),
                     ("nvidia-dkms-580-server", "580.159.04-0ubuntu0.24.04.1")), True),
    ("proprietary", (("nvidia-headless-no-dkms-580-server", "580.159.04-0ubuntu0.24.04.1"),), False),  # no module
    # method distro on Debian: the unbranched packages, at a version of the branch
    ("proprietary", (("nvidia-driver", "580.159.04-1"), ("nvidia-kernel-dkms", "580.159.04-1")), True),
    ("open", (("nvidia-driver", "580.159.04-1"), ("nvidia-open-kernel-dkms", "580.159.04-1")), True),
    ("proprietary", (("nvidia-driver", "535.261.03-1"), ("nvidia-kernel-dkms", "535.261.03-1")), False),
])
def test_the_driver_is_found_under_every_name_a_method_installs(
    nvml: dict[str, Any], flavour: str, rows: tuple[tuple[str, str], ...], in_sync: bool
) -> None:
    entry = drift.compare(_fact(nvml, installed__packages=_dpkg(*rows), desired__driver_flavour=flavour,
                                desired__driver_version=None, desired__nvswitch=False))["driver"]  # fmt: skip
    assert entry["in_sync"] is in_sync, entry["note"]


def _loaded(nvml: dict[str, Any], version: str) -> dict[str, Any]:
    """``nvml`` with driver ``version`` loaded."""
    return {**nvml, "driver_version": version, "kernel_module_version": version}


NVIDIA_595_OPEN = (("nvidia-driver-pinning-595", "595.71.05-1"), ("nvidia-open", "595.71.05-1"),
                   ("nvidia-dkms-open", "595.71.05-1"), ("libnvidia-compute", "595.71.05-1"),
                   ("nvidia-fabricmanager", "595.71.05-1"), ("python3-apt", "2.7.7"))


@pytest.mark.parametrize(("branch", "flavour", "rows", "in_sync"), [
    # NVIDIA's repository from R590: unbranched names, the branch in their version
    ("595", "open", NVIDIA_595_OPEN, True),
    ("595", "auto", NVIDIA_595_OPEN, True),
    ("595", "proprietary", NVIDIA_595_OPEN, False),  # nvidia-dkms and cuda-drivers were asked for
    ("610", "open", NVIDIA_595_OPEN, False),  # same names, another branch's version
    ("580", "open", NVIDIA_595_OPEN, False),
    ("595", "proprietary", (("cuda-drivers", "595.71.05-1"), ("nvidia-dkms", "595.71.05-1")), True),
])
def test_the_unbranched_driver_of_590_and_later_is_read_by_version(
    nvml: dict[str, Any], branch: str, flavour: str, rows: tuple[tuple[str, str], ...], in_sync: bool
) -> None:
    entry = drift.compare(_fact(_loaded(nvml, "595.71.05"), installed__packages=_dpkg(*rows),
                                desired__driver_branch=branch, desired__driver_flavour=flavour,
                                desired__driver_version=None, desired__nvswitch=False))["driver"]  # fmt: skip
    assert entry["in_sync"] is in_sync, entry["note"]


def test_fabric_manager_of_590_and_later_matches_the_unbranched_set(nvml: dict[str, Any]) -> None:
    nvml = _loaded(nvml, "595.71.05")
    fact = _fact(nvml, installed__packages=_dpkg(*NVIDIA_595_OPEN), desired__driver_branch="595",
                 desired__driver_version=None, desired__nvswitch=True)
    entry = drift.compare(fact)["fabric_manager"]
    assert entry["in_sync"] and entry["desired"] == {"package": "nvidia-fabricmanager", "version": "595.71.05"}
    behind = (*NVIDIA_595_OPEN[:4], ("nvidia-fabricmanager", "595.58.03-1"))
    entry = drift.compare(_fact(nvml, installed__packages=_dpkg(*behind), desired__driver_branch="595",
                                desired__driver_version=None, desired__nvswitch=True))["fabric_manager"]
    assert not entry["in_sync"] and "nvidia-fabricmanager differ from driver 595.71.05" in entry["note"]


def _record(data: dict[str, Any]) -> str:
    return json.dumps(data)


def test_runfile_and_archive_are_compared_with_the_roles_records(nvml: dict[str, Any]) -> None:
    """CUDA from the runfile and cuDNN from the archive: no packages, the records next to the toolkit say what is
    installed; another sha256 or version is drift, a missing record is drift."""
    sha_run, sha_arc = "a" * 64, "b" * 64
    no_packages = "\n".join(line for line in PACKAGES.splitlines() if not line.startswith(("cuda-", "libcudnn")))
    records = {"/usr/local/cuda-12.8/gpuprov-runfile.json": _record({"version": "12.8.1", "sha256": sha_run}),
               "/usr/local/cuda-12.8/gpuprov-cudnn.json": _record({"version": "9.10.2", "sha256": sha_arc,
                                                                    "archive": "x", "files": []})}
    want = {"desired__cuda_version": "12.8.1", "desired__cuda_method": "runfile",
            "desired__cuda_runfile_sha256": sha_run, "desired__cudnn_method": "archive",
            "desired__cudnn_archive_sha256": sha_arc, "installed__packages": no_packages}
    result = drift.compare(_fact(nvml, installed__files=records, **want))
    assert result["cuda"] == {"desired": {"version": "12.8.1", "sha256": sha_run},
                              "installed": {"version": "12.8.1", "sha256": sha_run}, "in_sync": True, "note": None}
    assert result["cudnn"]["in_sync"] and result["cudnn"]["installed"] == {"version": "9.10.2", "sha256": sha_arc}
    other = drift.compare(_fact(nvml, installed__files=records, **dict(want, desired__cudnn_archive_sha256="c" * 64,
                                                                          desired__cuda_version="12.8.0")))
    assert other["cudnn"]["note"] == f"gpuprov-cudnn.json records another file (sha256 {sha_arc})"
    assert other["cuda"]["note"] == "gpuprov-runfile.json records cuda 12.8.1"
    absent = drift.compare(_fact(nvml, installed__files=dict.fromkeys(records), **want))
    assert not absent["cuda"]["in_sync"] and absent["cuda"]["installed"] is None
    assert absent["cudnn"]["note"] == "no gpuprov-cudnn.json next to the toolkit: not installed from the file"
    # the package rule still applies to a package host: the same packages-free host is drift there
    assert not drift.compare(_fact(nvml, installed__packages=no_packages))["cuda"]["in_sync"]

def test_a_runfile_driver_is_read_from_the_installers_record(nvml: dict[str, Any]) -> None:
    """Method runfile: no driver package; the version nvidia-installer recorded decides."""
    packages = "linux-image-6.8.0-60-generic\tamd64\t6.8.0-60.63\tinstall ok installed"
    at = drift.compare(_fact(nvml, installed__packages=packages, installed__runfile_version="580.159.04\n"))
    assert at["driver"]["in_sync"] and at["driver"]["note"] == "installed from NVIDIA's runfile 580.159.04"
    assert at["driver"]["desired"]["runfile"] == "NVIDIA-Linux-x86_64-580.159.04.run"
    older = drift.compare(_fact(nvml, installed__packages=packages, installed__runfile_version="580.95.05"))
    assert not older["driver"]["in_sync"]
    assert older["driver"]["note"] == "the runfile driver is 580.95.05, not 580.159.04"
    other = drift.compare(_fact(nvml, installed__packages=packages, installed__runfile_version="570.1.2",
                                desired__driver_version=None))
    assert other["driver"]["note"] == "the runfile driver 570.1.2 is not on branch 580"
    # no record: the package rules decide, as before
    none = drift.compare(_fact(nvml, installed__packages=packages, installed__runfile_version=""))
    assert none["driver"]["installed"]["runfile_version"] is None and "runfile" not in none["driver"]["note"]
def test_an_unfinished_upgrade_is_drift_naming_what_it_left_stopped() -> None:
    from gpuprov.drift import compare

    marker = {"stage": "stopped", "units": ["nvidia-dcgm.service"], "containers": [{"id": "c1", "name": "trainer"}]}
    entry = compare({"desired": {}, "installed": {"upgrade_marker": json.dumps(marker)}})["upgrade"]
    assert entry["in_sync"] is False and entry["installed"] == marker
    assert "stage stopped with nvidia-dcgm.service, trainer stopped" in entry["note"]
    assert compare({"desired": {}, "installed": {}})["upgrade"]["in_sync"] is True
    assert compare({"desired": {}, "installed": {"upgrade_marker": None}})["upgrade"]["in_sync"] is True


@pytest.mark.parametrize("content", [b"[]", b'"stopped"', b'{"units": "nvidia-dcgm.service", "containers": ["x", 1]}',
                                     b'{"stage": "stopped", "units": "nvidia-dcgm.service"}',
                                     b'{"stage": "stopped", "containers": ["trainer"]}', b"{truncated"])
def test_a_damaged_upgrade_marker_is_drift_that_upgrade_cannot_finish(content: bytes) -> None:
    # the upgrade play reads units and containers as lists (playbooks/tasks/upgrade_host.yml, "Record the plan"): a
    # marker it cannot read names the manual fix, not "run gpuprov upgrade again"
    from gpuprov.drift import compare, damaged_upgrade

    entry = compare({"desired": {}, "installed": {"upgrade_marker": content.decode()}})["upgrade"]
    assert entry["in_sync"] is False and entry["installed"] is None and damaged_upgrade(entry)
    assert entry["note"].startswith("/var/lib/gpuprov/upgrade.json, the marker of an unfinished upgrade, is damaged")
    assert "remove the file, then run gpuprov upgrade again" in entry["note"]
    marker = {"stage": "stopping", "units": ["nvidia-dcgm.service"]}
    assert not damaged_upgrade(compare({"desired": {}, "installed": {"upgrade_marker": json.dumps(marker)}})["upgrade"])
    assert not damaged_upgrade(compare({"desired": {}, "installed": {}})["upgrade"])
