"""The drift report of ``gpuprov check FILE --json PATH``: per host, desired vs installed for each component.

Installed state is read on the hosts by ``roles/verify/tasks/drift.yml`` (one gpuprov.gpu.host_state call, which
reads dpkg-query and needs no python3-apt: the packages, the container runtime's configuration files, for CUDA and
cuDNN installed from NVIDIA's runfile or archive the record the role keeps next to the toolkit, the marker of an
unfinished ``gpuprov upgrade`` and the runfile driver's recorded version; NVML; ``nvidia-smi mig -lgi``) and
published with the desired values (the verify role's ``verify_expected_*`` variables) as the fact
``verify_drift``. :func:`compare` turns one host's fact into ``{component: {desired, installed, in_sync,
note}}`` for the components in :data:`COMPONENTS`; :mod:`gpuprov.drift_report` runs the probe and shows the report.

Package names are NVIDIA's (CUDA repository): the driver set as the collection names it
(``plugin_utils/driver_packages.py``), ``cuda-toolkit-<X>-<Y>``, ``libcudnn<N>-cuda-<X>``, ``libnccl2``,
``nvidia-container-toolkit``.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils import miglayout
from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import kernel_metas
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import (
    driver_packages,
    installed_forms,
    source_flavours,
)

from gpuprov.rolevars import is_true

log = logging.getLogger(__name__)

COMPONENTS = ("kernel", "driver", "fabric_manager", "cuda", "cudnn", "nccl", "container_toolkit", "runtime_config",
              "mig", "upgrade")

#: The installed NVIDIA driver set, ``<name>-<branch>[-open|-server]``, or from branch 590 NVIDIA's unbranched
#: ``<name>[-open]`` (``nvidia-open``, ``nvidia-dkms-open``, ``libnvidia-compute``): the meta package, its DKMS kernel
#: module source and the userland library; Ubuntu's headless metas (``nvidia-headless[-no-dkms]-<branch>-server``) stand
#: for the meta where method ubuntu-drivers installed them. Their version is the driver the host runs after its next
#: boot; the driver and Fabric Manager entries both read the set from here.
DRIVER_SET = ("nvidia-driver", "nvidia-dkms", "libnvidia-compute", "nvidia-open", "nvidia-headless",
              "nvidia-headless-no-dkms")
#: The branched meta and kernel-module names of :data:`DRIVER_SET` (the driver entry's "packages").
_BRANCHED_META_AND_KERNEL = ("nvidia-driver", "nvidia-dkms", "nvidia-headless", "nvidia-headless-no-dkms")
_DRIVER_PACKAGE = re.compile(rf"^({'|'.join(DRIVER_SET)})(-\d+.*|-open)?$")



def _upstream(version: str | None) -> str | None:
    """Debian version ``580.95.05-0ubuntu1`` / ``1:580.95.05-1`` -> ``580.95.05``."""
    if not version:
        return None
    return version.split(":", 1)[-1].split("-", 1)[0]


def _driver_packages(packages: dict[str, str], names: tuple[str, ...] = DRIVER_SET) -> dict[str, str]:
    """The installed packages of :data:`DRIVER_SET` (or only those named ``names``) -> {package: version}."""
    out: dict[str, str] = {}
    for package, version in packages.items():
        match = _DRIVER_PACKAGE.match(package)
        if match and match.group(1) in names:
            out[package] = version
    return out


def _driver_set_version(packages: dict[str, str]) -> str | None:
    """The upstream version (``580.95.05``) the installed driver set shares, None if none or mixed."""
    versions = {str(_upstream(v)) for v in _driver_packages(packages).values() if v}
    return versions.pop() if len(versions) == 1 else None


def _adopting(packages: dict[str, str]) -> bool:
    """Whether the roles adopt this host as it is: without python3-apt they install nothing and accept a driver
    loaded from elsewhere and a toolkit in parts (roles/nvidia_driver/tasks/adopt.yml, roles/cuda)."""
    return "python3-apt" not in packages


def _entry(desired: Any, installed: Any, in_sync: bool, note: str | None = None) -> dict[str, Any]:
    return {"desired": desired, "installed": installed, "in_sync": in_sync, "note": note}


def _none(value: Any) -> Any:
    return None if value in (None, "", "None", "none", "null") else value


def _kernel(packages: dict[str, str], running: str | None, selections: dict[str, str], hold: bool) -> dict[str, Any]:
    """Headers for every installed kernel and, with ``kernel.hold``, every kernel meta package held."""
    images = sorted(p[len("linux-image-"):] for p in packages if re.match(r"^linux-image-\d", p))
    missing = [k for k in images if f"linux-headers-{k}" not in packages]
    unheld = [m for m in kernel_metas(packages) if selections.get(m) != "hold"] if hold else []
    installed = {"running": running, "images": images, "without_headers": missing, "unheld_metas": unheld}
    notes = [f"no headers for {', '.join(missing)}: DKMS cannot build the driver for it"] if missing else []
    if unheld:
        notes.append(f"kernel.hold is true but {', '.join(unheld)} not held: apt upgrade can bring a kernel without "
                     "the driver module; run gpuprov apply --role nvidia_driver")
    desired = "headers installed for every installed kernel" + ("; kernel meta packages held" if hold else "")
    return _entry(desired, installed, not notes, "; ".join(notes) or None)


def _runfile_driver(branch: str, version: str | None, runfile: str, installed: dict[str, Any]) -> dict[str, Any]:
    """A driver NVIDIA's runfile installed (method runfile): no packages; ``runfile`` is the version its installer
    recorded (/var/lib/nvidia/log)."""
    problems = []
    if runfile.partition(".")[0] != branch:
        problems.append(f"the runfile driver {runfile} is not on branch {branch}")
    if version and runfile != version:
        problems.append(f"the runfile driver is {runfile}, not {version}")
    desired = {"branch": branch, "version": version, "runfile": f"NVIDIA-Linux-x86_64-{version or branch + '.*'}.run"}
    return _entry(desired, installed, not problems, "; ".join(problems) or f"installed from NVIDIA's runfile {runfile}")


def _driver(want: dict[str, Any], packages: dict[str, str], nvml: dict[str, Any], runfile: str | None = None,
            ) -> dict[str, Any]:
    branch = _none(want.get("driver_branch"))
    branch = None if branch == "auto" else branch
    version = _none(want.get("driver_version"))
    # validate refuses a flavour the repository does not package (server from 590): name the proprietary set then
    flavour = want.get("driver_flavour") if want.get("driver_flavour") in source_flavours(branch, "nvidia") else None
    names = driver_packages(branch, flavour)
    unbranched = installed_forms(branch, None)
    drivers = {**_driver_packages(packages, _BRANCHED_META_AND_KERNEL),
               **{name: packages[name] for name in (*unbranched["unbranched_meta"], *unbranched["unbranched_kernel"])
                  if name in packages}}
    nvml_version = nvml.get("driver_version") if nvml.get("available") else None
    # the loaded driver: the kernel module's own version, /sys/module/nvidia/version (readable when NVML is not,
    # e.g. after a userland upgrade NVML fails with NVML_ERROR_LIB_RM_VERSION_MISMATCH). Not NVML's reading: where
    # no module is loaded (the lab's containers, whose NVML is a mock of a captured host) NVML reports the
    # captured host's driver, not this host's
    loaded = _none(nvml.get("kernel_module_version"))
    package_version = _driver_set_version(packages)
    installed = {"packages": drivers, "nvml_driver_version": nvml_version,
                 "kernel_module_version": nvml.get("kernel_module_version"), "runfile_version": runfile}
    if branch and not drivers and runfile:
        return _runfile_driver(branch, version, runfile, installed)
    desired = {"branch": branch or "auto", "version": version,
               "packages": [names["meta"], names["dkms"]] if branch else []}
    if branch and not drivers and _adopting(packages) and nvml_version and nvml_version.split(".")[0] == branch:
        # adopted as it is (the nvidia_driver role's adopt path): the loaded driver is on the branch, no package
        return _entry(desired, installed, True, f"adopted: the loaded driver {nvml_version} is on branch {branch} "
                                                "and was not installed from packages")
    problems = [] if not branch else [f"{name} is not installed" for part, name in (("meta", names["meta"]),
                                                                               ("kernel", names["dkms"]))
                                      if not _has_driver_part(packages, branch, want.get("driver_flavour"), part)]
    if not branch and not drivers:
        problems.append("no nvidia-driver-<branch> package is installed")
    if version:
        wrong = sorted(p for p, v in drivers.items() if _upstream(v) != version)
        if wrong:
            problems.append(f"{', '.join(wrong)} not at {version}")
        if nvml_version and nvml_version != version:
            problems.append(f"NVML reports driver {nvml_version}")
    if package_version and loaded and package_version != loaded:
        problems.append(f"the installed driver packages are {package_version} but the loaded kernel module is "
                        f"{loaded}: reboot pending or driver replaced under a loaded module")
    return _entry(desired, installed, not problems, "; ".join(problems) or None)


def _has_driver_part(packages: dict[str, str], branch: str, flavour: Any, part: str) -> bool:
    """Whether the host has ``part`` (``meta`` or ``kernel``) of driver ``branch`` in ``flavour`` under any name the
    nvidia_driver role's methods install it by (NVIDIA's repository, Ubuntu's ``-server`` builds and precompiled
    modules, Debian's unbranched packages at the branch's version)."""
    forms = installed_forms(branch, flavour)
    if any(name in packages for name in forms[part]):
        return True
    if part == "kernel" and forms["kernel_prefixes"] and any(p.startswith(forms["kernel_prefixes"]) for p in packages):
        return True
    return any(str(_upstream(packages[name]) or "").split(".")[0] == branch
               for name in forms[f"unbranched_{part}"] if name in packages)


def _fabric_manager(want: dict[str, Any], packages: dict[str, str], nvml: dict[str, Any]) -> dict[str, Any]:
    found = {p: v for p, v in packages.items() if p.startswith("nvidia-fabricmanager")}
    required = bool(want.get("nvswitch"))
    if not required:
        return _entry("not required (gpus.nvswitch false)", found, True)
    branch = _none(want.get("driver_branch"))
    name = driver_packages(branch)["fabric_manager"] if branch and branch != "auto" else "nvidia-fabricmanager-<branch>"
    # the version to match is the installed driver set's (what the host runs after its next boot, and what the
    # role pins Fabric Manager to: the daemon refuses to start at another version); NVML's reading (the loaded
    # driver) only where no package says
    driver = _driver_set_version(packages) \
        or (nvml.get("driver_version") if nvml.get("available") else None) or _none(want.get("driver_version"))
    if not found and _adopting(packages) and not _driver_packages(packages, ("nvidia-driver", "nvidia-open")) \
            and nvml.get("available"):
        return _entry({"package": name, "version": driver}, found, True,
                      "not managed: the driver was adopted as it is (no driver packages), so Fabric Manager is the "
                      "platform's too")
    if not found:
        return _entry({"package": name, "version": driver}, found, False,
                      f"{name} is not installed (NVSwitch system: CUDA fails with 802 without it)")
    off = sorted(p for p, v in found.items() if driver and _upstream(v) != driver)
    return _entry({"package": name, "version": driver}, found, not off,
                  f"{', '.join(off)} differ from driver {driver}" if off else None)


def _cuda(want: dict[str, Any], packages: dict[str, str]) -> dict[str, Any]:
    found = {p: v for p, v in packages.items() if re.match(r"^cuda-toolkit-\d+-\d+$", p)}
    version = _none(want.get("cuda_version"))
    if not version:
        return _entry(None, found, True, "not managed (cuda.version is null)")
    parts = str(version).split(".")
    name = f"cuda-toolkit-{parts[0]}-{parts[1] if len(parts) > 1 else 0}"
    if name not in packages:
        parts = [name.replace("toolkit", part) for part in ("nvcc", "cudart")]
        if _adopting(packages) and all(p in packages for p in parts):  # NVIDIA's debs without the meta, adopted
            return _entry({"package": name, "version": version}, {p: packages[p] for p in parts}, True,
                          f"installed in parts ({', '.join(parts)}), adopted")
        return _entry({"package": name, "version": version}, found, False, f"{name} is not installed")
    ok = len(parts) < 3 or _upstream(packages[name]) == version or str(_upstream(packages[name])).startswith(version)
    return _entry({"package": name, "version": version}, found, ok, None if ok else f"{name} is {packages[name]}")


def _library(key: str, pattern: str, want: dict[str, Any], packages: dict[str, str]) -> dict[str, Any]:
    found = {p: v for p, v in packages.items() if re.match(pattern, p)}
    version = _none(want.get(key))
    if not version:
        return _entry(None, found, True, f"not managed ({key.replace('_version', '')}.version is null)")
    ok = any(str(_upstream(v)).startswith(str(version)) for v in found.values())
    note = None if ok else (f"no {pattern.strip('^$')} package at {version}" if found else "not installed")
    return _entry({"version": version}, found, ok, note)


def _record(content: Any) -> dict[str, Any] | None:
    """A role's record of what it installed from one of NVIDIA's files (JSON text) -> the mapping; None when the
    file is absent or not a JSON object."""
    if not content:
        return None
    try:
        data = json.loads(str(content))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _from_file(section: str, version: Any, sha256: Any, record: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """CUDA (runfile) or cuDNN (archive) from the role's record ``name`` (``gpuprov-runfile.json``): in sync when it
    names the wanted version (or a longer one starting with it) and, where the fleet pins one, the same sha256."""
    version = _none(version)
    if not version:
        return _entry(None, record, True, f"not managed ({section}.version is null)")
    desired = {"version": str(version), "sha256": str(sha256).lower() if _none(sha256) else None}
    if record is None:
        return _entry(desired, None, False, f"no {name} next to the toolkit: not installed from the file")
    have = str(record.get("version", ""))
    installed = {"version": have, "sha256": record.get("sha256")}
    if have != str(version) and not have.startswith(f"{version}."):
        return _entry(desired, installed, False, f"{name} records {section} {have}")
    if desired["sha256"] and record.get("sha256") != desired["sha256"]:
        return _entry(desired, installed, False, f"{name} records another file (sha256 {record.get('sha256')})")
    return _entry(desired, installed, True)


def _runtime(want: dict[str, Any], packages: dict[str, str], files: dict[str, Any]) -> tuple[dict[str, Any],
                                                                                                dict[str, Any]]:
    runtime = want.get("container_runtime") or "docker"
    toolkit = {p: v for p, v in packages.items() if p == "nvidia-container-toolkit"}
    if runtime == "none":
        return (_entry("not required (container_runtime none)", toolkit, True),
                _entry("not required (container_runtime none)", None, True))
    tk = _entry({"package": "nvidia-container-toolkit"}, toolkit, bool(toolkit),
                None if toolkit else "nvidia-container-toolkit is not installed")

    def text(path: str) -> str | None:
        content = files.get(path)
        return None if content is None else str(content)

    if runtime == "docker":
        path, raw = "/etc/docker/daemon.json", text("/etc/docker/daemon.json")
        try:
            runtimes = (json.loads(raw) if raw else {}).get("runtimes") or {}
        except ValueError:
            return tk, _entry({"file": path, "runtime": "nvidia"}, "unparseable", False, f"{path} is not valid JSON")
        has = "nvidia" in runtimes
    else:
        path, raw = "/etc/containerd/config.toml", text("/etc/containerd/config.toml")
        has = bool(raw) and re.search(r"runtimes\.[\"']?nvidia[\"']?\]", raw or "") is not None
    note = None if has else (f"{path} is missing" if raw is None else f"{path} has no nvidia runtime")
    return tk, _entry({"file": path, "runtime": "nvidia"}, {"file_present": raw is not None, "nvidia_runtime": has},
                      has, note)


def _mig(want: dict[str, Any], nvml: dict[str, Any], instances_text: str) -> dict[str, Any]:
    rules = miglayout
    gpus = [g for g in nvml.get("gpus") or [] if not g.get("lost")]
    modes = {g.get("index"): (g.get("mig") or {}).get("current") for g in gpus}
    instances = rules.parse_mig_instances(instances_text or "")
    installed = {"mig_enabled": {str(k): v for k, v in modes.items()},
                 "instances": {str(k): v for k, v in instances.items()}}
    layout = want.get("mig_layout")
    if rules.unset(layout):
        return _entry(None, installed, True, "not managed (mig.layout is null)")
    desired, problem = rules.desired_layout(layout, want.get("mig_layouts"), list(modes))
    if desired is None:
        return _entry({"layout": layout}, installed, False, problem)
    problems = rules.layout_problems(desired, modes, instances)
    return _entry({"layout": layout, "gpus": desired}, installed, not problems, "; ".join(problems) or None)


#: The marker playbooks/tasks/upgrade_host.yml (__upgrade_marker) leaves from stopping a host's GPU services until it
#: passed the verify ladder; the verify role's drift probe reads it (__verify_drift_upgrade_marker).
UPGRADE_MARKER = "/var/lib/gpuprov/upgrade.json"


def _upgrade(marker: Any) -> dict[str, Any]:
    """An unfinished ``gpuprov upgrade``: the marker (JSON text) playbooks/tasks/upgrade_host.yml leaves on a host
    from stopping its GPU services until it passed the verify ladder. A damaged marker (not JSON, not an object, no
    ``stage``, ``units`` or ``modules`` not a list of names, ``containers`` not a list of objects with an ``id``, e.g.
    after an edit by hand) is drift too, with ``installed`` None: it no longer says what that upgrade stopped, so the
    upgrade play cannot finish it (see :func:`damaged_upgrade`)."""
    if not marker:
        return _entry("finished", None, True)
    try:
        state = json.loads(str(marker))
    except (ValueError, TypeError):
        state = None
    state = state if isinstance(state, dict) else {}
    units, modules, containers = (state.get(key, []) for key in ("units", "modules", "containers"))
    if (not isinstance(state.get("stage"), str)
            or not all(isinstance(v, list) and all(isinstance(n, str) for n in v) for v in (units, modules))
            or not isinstance(containers, list) or not all(isinstance(c, dict) and "id" in c for c in containers)):
        return _entry("finished", None, False,
                      f"{UPGRADE_MARKER}, the marker of an unfinished upgrade, is damaged and no longer says what it "
                      "stopped: start the GPU services and containers by hand, remove the file, then run gpuprov "
                      "upgrade again")
    stopped = ", ".join([*units, *(str(c.get("name", c["id"])) for c in containers)])
    return _entry("finished", state, False, f"an upgrade stopped at stage {state['stage']} with "
                  f"{stopped or 'nothing'} stopped: run gpuprov upgrade again to finish it")


def damaged_upgrade(entry: dict[str, Any]) -> bool:
    """Whether a host's ``upgrade`` component (:func:`compare`) is a damaged marker, which ``gpuprov upgrade``
    refuses (the upgrade play would fail reading it) rather than plans."""
    return not entry["in_sync"] and entry["installed"] is None


def compare(drift: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One host's ``verify_drift`` fact -> ``{component: {desired, installed, in_sync, note}}`` for every
    component of :data:`COMPONENTS` (versions are Debian package versions or NVML's driver version)."""
    want = drift.get("desired") or {}
    have = drift.get("installed") or {}
    packages = {str(n): str(v) for n, v in (have.get("versions") or {}).items()}
    selections = {str(n): str(v) for n, v in (have.get("selections") or {}).items()}
    nvml = have.get("nvml") or {}
    files = {str(p): t for p, t in (have.get("files") or {}).items()}
    toolkit, runtime = _runtime(want, packages, files)
    records = {p.rsplit("/", maxsplit=1)[-1]: _record(t) for p, t in files.items()}
    cuda = (_from_file("cuda", want.get("cuda_version"), want.get("cuda_runfile_sha256"),
                       records.get("gpuprov-runfile.json"), "gpuprov-runfile.json")
            if want.get("cuda_method") == "runfile" else _cuda(want, packages))
    cudnn = (_from_file("cudnn", want.get("cudnn_version"), want.get("cudnn_archive_sha256"),
                        records.get("gpuprov-cudnn.json"), "gpuprov-cudnn.json")
             if want.get("cudnn_method") == "archive"
             else _library("cudnn_version", r"^libcudnn\d+(-cuda-\d+)?$", want, packages))
    return {
        "kernel": _kernel(packages, have.get("kernel"), selections, is_true(want.get("kernel_hold"))),
        "driver": _driver(want, packages, nvml, _none(str(have.get("runfile_version") or "").strip())),
        "fabric_manager": _fabric_manager(want, packages, nvml),
        "cuda": cuda,
        "cudnn": cudnn,
        "nccl": _library("nccl_version", r"^libnccl2$", want, packages),
        "container_toolkit": toolkit,
        "runtime_config": runtime,
        "mig": _mig(want, nvml, str(have.get("mig_instances") or "")),
        "upgrade": _upgrade(have.get("upgrade_marker")),
    }
