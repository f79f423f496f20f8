"""Hardware and version checks on one host's merged settings, and resolution of ``auto`` choices.

Every rule reads :mod:`gpuprov.matrix` (NVIDIA's numbers, cited per row in ``plugins/plugin_utils/matrix.yml``).
A failed rule is reported at the field a user should change, on the line of the most specific layer
that set it (the host's line when the value is a schema default). Resolved ``auto`` values are written
into the settings and recorded as :class:`~gpuprov.fleet.model.Resolution` with the reason.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from urllib.parse import urlsplit

from gpuprov.fleet.errors import suggest_fix
from gpuprov.fleet.hostcheck import HostCheck
from gpuprov.fleet.mig import check_mig
from gpuprov.fleet.nvidia_files import check_nvidia_files
from gpuprov.matrix import BRANCH_KIND_NAMES, DriverBranch, GpuModel, Matrix, branch_of, version_key
from gpuprov.resources import role_defaults

_LONG_LIVED = ("ltsb", "production")


def default_dcgm() -> str:
    """The DCGM version the monitoring role installs when the fleet names none (its ``monitoring_dcgm_version``)."""
    return str(role_defaults("monitoring")["monitoring_dcgm_version"])


def check_host(ctx: HostCheck, settings: dict[str, Any], matrix: Matrix) -> None:
    """Check one host's effective ``settings`` (changed in place: ``auto`` resolved) against ``matrix``."""
    gpus = settings["gpus"]
    gpu = matrix.gpu(gpus["model"])
    if gpu is None:
        ctx.fail(("gpus", "model"), f"unknown GPU model {gpus['model']!r}",
                 suggest_fix(gpus["model"], sorted(matrix.gpus), "a model from `gpuprov matrix --section gpus`"))
    elif gpu.model != gpus["model"]:
        ctx.resolve(settings, ("gpus", "model"), gpu.model, f"{gpus['model']!r} is spelled {gpu.model} in the matrix")
    if gpu is not None and gpu.host_arch != "x86_64":
        ctx.fail(("gpus", "model"), f"{gpu.model} hosts are {gpu.host_arch} (NVIDIA Grace): gpuprov installs from "
                 "NVIDIA's x86_64 repositories only", "provision Grace hosts with NVIDIA's sbsa repository outside "
                 "gpuprov, or use an x86_64 model (gpuprov matrix --section gpus)")
    _check_method(ctx, settings, matrix)
    _check_monitoring(ctx, settings)
    check_nvidia_files(ctx, settings)
    cuda_ok = _check_cuda(ctx, settings, matrix, gpu)
    branch = _resolve_branch(ctx, settings, matrix, gpu, cuda_ok)
    if branch is None or branch not in matrix.branches:
        return
    _check_branch(ctx, settings, matrix, gpu, branch)
    _check_lifecycle(ctx, settings, matrix, gpu, branch, cuda_ok)
    _check_libraries(ctx, settings, matrix, branch, cuda_ok)
    if gpu is not None:
        _check_flavour(ctx, settings, matrix, gpu, branch)
        _check_hardware(ctx, settings, matrix, gpu)


#: The file name NVIDIA gives its Linux x86_64 driver installer (download.nvidia.com/XFree86/Linux-x86_64/<v>/)
_RUNFILE_NAME = re.compile(r"NVIDIA-Linux-x86_64-(\d+\.\d+(?:\.\d+)?)(?:-[a-z-]+)?\.run$")


def _check_method(ctx: HostCheck, s: dict[str, Any], m: Matrix) -> None:
    drv, os_name = s["driver"], s["os"]
    method = drv["method"]  # one of gpuprov.matrix.INSTALL_METHODS (the schema's choices), all carried out by the role
    if method == "ubuntu-drivers" and m.os[os_name].family != "ubuntu":
        ctx.fail(("driver", "method"), f"ubuntu-drivers exists only on Ubuntu, not on {os_name}",
                 "use method cuda-repo (or distro)")
    if method == "runfile":
        needs = {
            "runfile_sha256": "add the runfile's SHA-256 (`sha256sum NVIDIA-Linux-x86_64-<version>.run`)",
            "runfile_url": "add the URL gpuprov downloads the runfile from (your mirror)",
            "version": 'add the exact driver version the runfile installs, e.g. "580.95.05"',
        }
        for key, fix in needs.items():
            if drv[key] is None:
                ctx.fail(("driver", key), f"driver method runfile needs driver.{key}", fix, anchor=("driver", "method"))
        _check_runfile_name(ctx, drv)


def _check_runfile_name(ctx: HostCheck, drv: dict[str, Any]) -> None:
    """A runfile URL named as NVIDIA names its installers must name driver.version: the role installs the file
    and records driver.version as what it installed, so a mismatch would reinstall on every run. A URL from
    ``{env: NAME}`` or under another name is not checked (its content is, by driver.runfile_sha256)."""
    url, version = drv["runfile_url"], drv["version"]
    if not isinstance(url, str) or version is None:
        return
    named = _RUNFILE_NAME.search(urlsplit(url).path)
    if named is not None and named.group(1) != version:
        ctx.fail(("driver", "runfile_url"), f"driver.runfile_url names driver {named.group(1)}, but driver.version is "
                 f"{version}", f'set driver.version: "{named.group(1)}", or point runfile_url at '
                 f"NVIDIA-Linux-x86_64-{version}.run")


def _check_monitoring(ctx: HostCheck, s: dict[str, Any]) -> None:
    """dcgm-exporter ``<dcgm>-<exporter>`` must be built for the DCGM the host runs, or it restarts in a
    loop with "API version mismatch" (the monitoring role refuses it too, but only once it runs on the host)."""
    mon = s["monitoring"]
    exporter, dcgm = mon["dcgm_exporter_version"], mon["dcgm_version"] or default_dcgm()
    if exporter is None or exporter.split("-", maxsplit=1)[0] == dcgm:
        return
    built_for = exporter.split("-", maxsplit=1)[0]
    configured = "monitoring.dcgm_version" if mon["dcgm_version"] else "the monitoring role's default, as " \
        "monitoring.dcgm_version is not set"
    ctx.fail(("monitoring", "dcgm_exporter_version"),
             f"dcgm-exporter {exporter} is built for DCGM {built_for}, but the host runs DCGM {dcgm} ({configured}): "
             'it would restart in a loop with "API version mismatch"',
             f"upgrade both together: a {dcgm}-<exporter version> build here, or "
             f'monitoring.dcgm_version: "{built_for}"')


def _check_cuda(ctx: HostCheck, s: dict[str, Any], m: Matrix, gpu: GpuModel | None) -> bool:
    """Check cuda.version alone (known, published for the OS, can target the GPU); True when usable."""
    cuda, os_name = s["cuda"]["version"], s["os"]
    if cuda is None:
        return False
    if m.cuda_release(cuda) is None:
        ctx.fail(("cuda", "version"), f"CUDA {cuda} is not in gpuprov's matrix",
                 suggest_fix(cuda, sorted(m.cuda, key=version_key), "a known CUDA version"))
        return False
    if not m.os_has_cuda(os_name, cuda):
        entry = m.os[os_name]
        ctx.fail(("cuda", "version"), f"CUDA {cuda} is not published for {os_name}",
                 f"use CUDA {entry.cuda_first} to {entry.cuda_last} on {os_name}, or another OS")
        return False
    if gpu is not None and version_key(cuda) < version_key(gpu.min_cuda):
        ctx.fail(("cuda", "version"), f"CUDA {cuda} cannot target {gpu.model} ({gpu.architecture})",
                 f"use CUDA {gpu.min_cuda} or newer")
        return False
    if gpu is not None and gpu.max_cuda and version_key(cuda) > version_key(gpu.max_cuda):
        ctx.fail(("cuda", "version"), f"CUDA {cuda} dropped {gpu.model} ({gpu.architecture})",
                 f"use CUDA {gpu.max_cuda} or older")
        return False
    return True


def _resolve_branch(
    ctx: HostCheck, s: dict[str, Any], m: Matrix, gpu: GpuModel | None, cuda_ok: bool
) -> str | None:
    drv = s["driver"]
    branch, version = drv["branch"], drv["version"]
    if version is not None and branch != "auto" and branch_of(version) != branch:
        ctx.fail(("driver", "version"), f"driver version {version} is not on branch {branch}",
                 f'set driver.branch to "{branch_of(version)}" or pick a {branch}.x version')
        return None
    if branch == "auto" and version is not None:
        branch = branch_of(version)
        ctx.resolve(s, ("driver", "branch"), branch, f"branch of driver.version {version}")
    elif branch == "auto":
        entry = m.os.get(s["os"])
        if drv["method"] == "distro" and entry is not None and entry.distro_branches is None:
            ctx.fail(("driver", "branch"), f"driver.branch auto with method distro: {s['os']}'s archive carries "
                     "several nvidia-driver-<branch>-server branches and gpuprov does not know which",
                     'name one in driver.branch, e.g. "570"')
            return None
        picked = _pick_branch(m, s, gpu, cuda_ok)
        if picked is None:
            ctx.fail(("driver", "branch"), "no driver branch in the matrix fits this host's OS, GPU and CUDA",
                     "set driver.branch explicitly, or change os or cuda.version")
            return None
        branch, reason = picked
        ctx.resolve(s, ("driver", "branch"), branch, reason)
    if branch not in m.branches:
        ctx.fail(("driver", "branch"), f"driver branch {branch} is not in gpuprov's matrix",
                 suggest_fix(branch, m.branches_sorted(), "a known branch"))
    return str(branch)


def today() -> dt.date:
    """The date end-of-life dates are compared with (a function, so tests can set the day)."""
    return dt.date.today()


def _fitting_branches(m: Matrix, s: dict[str, Any], gpu: GpuModel | None, cuda_ok: bool,
                      full: bool = True) -> list[str]:
    """The branches that fit the host (published for its OS and method, support its GPU, run its CUDA - with
    full compatibility, or with ``full`` false under minor-version compatibility - and cuDNN build), newest
    first."""
    os_name, method = s["os"], s["driver"]["method"]
    cuda = s["cuda"]["version"] if cuda_ok else None
    cuda_rel = m.cuda_release(cuda) if cuda else None
    minimum = m.min_driver(cuda) if cuda and not full else None
    cuda_branch = int(branch_of(minimum)) if minimum else int(cuda_rel.branch) if cuda_rel else None
    build = m.cudnn_build(s["cudnn"]["version"], cuda) if cuda and s["cudnn"]["version"] else None
    fits = []
    for branch in reversed(m.branches_sorted()):
        number = int(branch)
        if gpu is not None and (number < int(gpu.min_branch) or (gpu.max_branch and number > int(gpu.max_branch))):
            continue
        if m.os_has_branch(os_name, branch, method) is False:
            continue
        if cuda_branch is not None and number < cuda_branch:
            continue
        if build is not None and number < int(branch_of(build.min_driver)):
            continue
        fits.append(branch)
    return fits


def _preferred(m: Matrix, fits: list[str], day: dt.date) -> tuple[str, str] | None:
    """The branch ``auto`` takes of ``fits`` (newest first), with how it was chosen: the oldest long-term support
    branch whose published end of life is still ahead (the one NVIDIA has fixed longest, R580 until June 2028: a
    newer one only where the GPU or CUDA needs it); else the newest long-lived branch with a published end of life
    ahead, long-lived not past its end of life, any not past it, any."""
    current = [b for b in fits if not m.branches[b].ended(day)]
    long_lived = [b for b in current if m.branches[b].kind in _LONG_LIVED]
    dated = [b for b in long_lived if m.branches[b].eol]
    ltsb = [b for b in dated if m.branches[b].kind == "ltsb"]
    if ltsb:
        return ltsb[-1], "oldest still supported"
    branch = next(iter(dated or long_lived or current or fits), None)
    return (branch, "newest") if branch is not None else None


def _pick_branch(m: Matrix, s: dict[str, Any], gpu: GpuModel | None, cuda_ok: bool) -> tuple[str, str] | None:
    """The fitting branch (:func:`_fitting_branches`) :func:`_preferred` takes, with the reason."""
    full = True
    fits = _fitting_branches(m, s, gpu, cuda_ok)
    if not fits:
        # no branch this OS offers runs the CUDA release with full compatibility (its toolkit's branch is newer
        # than any the OS row lists): an older branch runs it under minor-version compatibility
        full, fits = False, _fitting_branches(m, s, gpu, cuda_ok, full=False)
    picked = _preferred(m, fits, today())
    if picked is None:
        return None
    branch, how = picked
    os_name, method, cuda = s["os"], s["driver"]["method"], s["cuda"]["version"]
    reason = f"{how} {m.branches[branch].kind} branch {method} offers on {os_name}"
    if gpu is not None:
        reason += f" that supports {gpu.model}"
    if cuda_ok and cuda and m.cuda_release(cuda) is not None:
        reason += f" and runs CUDA {cuda} with {'full' if full else 'minor-version'} compatibility"
    if m.branches[branch].eol:
        reason += f" (NVIDIA supports it to {m.branches[branch].eol_text()})"
    return branch, reason


def _check_branch(ctx: HostCheck, s: dict[str, Any], m: Matrix, gpu: GpuModel | None, branch: str) -> None:
    os_name, method, number = s["os"], s["driver"]["method"], int(branch)
    if gpu is not None and number < int(gpu.min_branch):
        ctx.fail(("driver", "branch"), f"driver branch {branch} does not support {gpu.model} (first: {gpu.min_branch})",
                 f"use driver branch {gpu.min_branch} or newer")
    elif gpu is not None and gpu.max_branch is not None and number > int(gpu.max_branch):
        ctx.fail(("driver", "branch"), f"driver branch {branch} dropped {gpu.model} (last: {gpu.max_branch})",
                 f"use driver branch {gpu.max_branch} or older")
    elif m.os_has_branch(os_name, branch, method) is False:
        entry = m.os[os_name]
        offered = entry.cuda_repo_branches if method == "cuda-repo" else entry.distro_branches or ()
        ctx.fail(("driver", "branch"), f"driver branch {branch} is not published for {os_name} (method {method})",
                 f"use one of {', '.join(offered)} on {os_name}")


#: The driver methods whose packages the matrix lists per OS (``os_has_branch``); runfile takes any branch.
PACKAGE_METHODS = ("cuda-repo", "distro")


def _supported_fits(m: Matrix, s: dict[str, Any], gpu: GpuModel | None, cuda_ok: bool, day: dt.date) -> list[str]:
    """The fitting branches (:func:`_fitting_branches`) whose published end of life is still ahead on ``day``:
    those NVIDIA's current support table lists."""
    return [b for b in _fitting_branches(m, s, gpu, cuda_ok) if m.branches[b].eol and not m.branches[b].ended(day)]


def _check_lifecycle(ctx: HostCheck, s: dict[str, Any], m: Matrix, gpu: GpuModel | None, branch: str,
                     cuda_ok: bool) -> None:
    """A branch past NVIDIA's end of life gets no fixes, security fixes included: a warning naming the branch
    that replaces it on this host (the one ``auto`` would pick)."""
    entry, day = m.branches[branch], today()
    ender = entry if entry.ended(day) else _newer_ended_ltsb(m, branch, day) if entry.eol is None else None
    if ender is None:
        return
    picked = _preferred(m, _supported_fits(m, s, gpu, cuda_ok, day), day)
    if picked is not None:
        new = m.branches[picked[0]]
        fix = (f'move to driver.branch "{new.branch}" ({BRANCH_KIND_NAMES[new.kind]}, supported to '
               f"{new.eol_text()})")
    else:
        method = s["driver"]["method"]
        # the other package sources the matrix knows to publish a supported branch that fits this OS
        others = [other for other in PACKAGE_METHODS if other != method and any(
            m.os_has_branch(s["os"], b, other)
            for b in _supported_fits(m, {**s, "driver": {**s["driver"], "method": other}}, gpu, cuda_ok, day))]
        fix = (f"no branch NVIDIA still supports fits this host ({s['os']}, method {method}, its GPU and CUDA): "
               f"{''.join(f'method {other} or ' for other in others)}a newer OS carries newer branches "
               "(`gpuprov matrix --section os`, `--section driver_branches`)")
    when = (f"in {entry.eol_text()}" if ender is entry else
            f"no later than {ender.eol_text()}, when the newer long-term support branch {ender.branch} did")
    ctx.warn(("driver", "branch"),
             f"driver branch {branch} ({BRANCH_KIND_NAMES[entry.kind]}) reached end of life {when}: "
             "NVIDIA publishes no more fixes for it, security fixes included", fix)


def _newer_ended_ltsb(m: Matrix, branch: str, day: dt.date) -> DriverBranch | None:
    """For a branch NVIDIA's table gives no end date (an old one): the oldest newer long-term support branch
    already past its end on ``day``, or None. No branch is supported longer than a newer long-term one
    (https://docs.nvidia.com/datacenter/tesla/drivers/index.html: long-term branches are the longest-lived), so
    the branch ended no later than it."""
    newer = sorted((b for b in m.branches.values() if b.kind == "ltsb" and b.branch.isdigit() and branch.isdigit()
                    and int(b.branch) > int(branch) and b.ended(day)), key=lambda b: int(b.branch))  # fmt: skip
    return newer[0] if newer else None


def _check_libraries(ctx: HostCheck, s: dict[str, Any], m: Matrix, branch: str, cuda_ok: bool) -> None:
    cuda, number = s["cuda"]["version"], int(branch)
    rel = m.cuda_release(cuda) if cuda_ok else None
    if rel is not None and not m.branch_supports_cuda(branch, cuda):
        ctx.fail(("driver", "branch"), f"driver branch {branch} cannot run CUDA {cuda} (needs driver >= "
                 f"{m.min_driver(cuda)})", f"use driver branch {rel.branch} or newer, or an older CUDA")
    elif rel is not None and number < int(rel.branch):
        ctx.notes.append(f"driver {branch} is older than {rel.driver}, which CUDA {cuda} shipped with: it runs "
                         "under minor-version compatibility (no JIT of newer PTX)")
    for lib in ("cudnn", "nccl"):
        version = s[lib]["version"]
        if version is None:
            continue
        if cuda is None:
            ctx.fail((lib, "version"), f"{lib} {version} needs a CUDA toolkit",
                     f"set cuda.version, or {lib}.version: null")
        elif cuda_ok:
            _check_library(ctx, m, lib, version, cuda, number)


def _check_library(ctx: HostCheck, m: Matrix, lib: str, version: str, cuda: str, branch: int) -> None:
    major = int(cuda.split(".", maxsplit=1)[0])
    if lib == "cudnn":
        rel = m.cudnn_release(version)
        if rel is None:
            ctx.fail((lib, "version"), f"cuDNN {version} is not in gpuprov's matrix",
                     suggest_fix(version, list(m.cudnn), "a known cuDNN release"))
            return
        build = m.cudnn_build(version, cuda)
        if build is None:
            built = [f"{b.cuda[0]}-{b.cuda[-1]}" if len(b.cuda) > 1 else b.cuda[0] for b in rel.builds]
            fitting = [r.version for r in m.cudnn.values() if m.cudnn_build(r.version, cuda)]
            ctx.fail((lib, "version"), f"cuDNN {version} is built for CUDA {', '.join(built)}, not CUDA {cuda}",
                     f"use cuDNN {fitting[-1]} for CUDA {cuda}" if fitting else "change cuda.version")
        elif branch < int(branch_of(build.min_driver)):
            ctx.fail(("driver", "branch"), f"cuDNN {version} for CUDA {major} needs driver >= {build.min_driver}",
                     f"use driver branch {branch_of(build.min_driver)} or newer")
        return
    nccl = m.nccl_release(version)
    if nccl is None:
        ctx.fail((lib, "version"), f"NCCL {version} is not in gpuprov's matrix",
                 suggest_fix(version, list(m.nccl), "a known NCCL release"))
    elif not m.nccl_supports(version, cuda):
        fitting = [r.version for r in m.nccl.values() if major in r.cuda_majors]
        ctx.fail((lib, "version"), f"NCCL {version} is built for CUDA {', '.join(nccl.cuda)}, not CUDA {major}.x",
                 f"use NCCL {fitting[-1]} for CUDA {cuda}" if fitting else "change cuda.version")


def _check_flavour(ctx: HostCheck, s: dict[str, Any], m: Matrix, gpu: GpuModel, branch: str) -> None:
    flavour, number = s["driver"]["flavour"], int(branch)
    first, default = int(m.open_first_branch), int(m.open_default_branch)
    what = f"{gpu.model} is {gpu.architecture.capitalize()}"
    if flavour == "open" and gpu.open_modules == "unsupported":
        ctx.fail(("driver", "flavour"), f"open kernel modules do not support {gpu.model} ({gpu.architecture})",
                 "use flavour proprietary (or auto)")
    elif flavour == "open" and number < first:
        ctx.fail(("driver", "flavour"), f"open kernel modules start with branch {first}, not {branch}",
                 f"use flavour proprietary or driver branch {first}+")
    elif flavour == "proprietary" and gpu.open_modules == "required":
        ctx.fail(("driver", "flavour"), f"{what}: it requires the open kernel modules",
                 "use flavour open (or auto)")
    elif flavour == "open" and gpu.segment != "datacenter" and number < default:
        ctx.notes.append(f"open modules on {gpu.segment} GPUs before R{default} were not production quality")
    elif flavour == "auto":
        if gpu.open_modules == "required":
            value, reason = "open", f"{what}: proprietary modules do not support it"
        elif gpu.open_modules == "unsupported":
            value, reason = "proprietary", f"{what}: open modules need Turing or newer"
        elif number >= default:
            value, reason = "open", f"{what} and branch {branch} >= {default}, where open is NVIDIA's default"
        elif gpu.segment == "datacenter" and number >= first:
            value, reason = "open", f"{what} (datacenter) and open modules are production from branch {first}"
        else:
            value, reason = "proprietary", f"{what} and open modules are not the default before branch {default}"
        ctx.resolve(s, ("driver", "flavour"), value, reason)


def _check_hardware(ctx: HostCheck, s: dict[str, Any], m: Matrix, gpu: GpuModel) -> None:
    gpus, method, os_name = s["gpus"], s["driver"]["method"], s["os"]
    count = gpus["count"]
    if gpus["nvswitch"]:
        if not gpu.nvswitch_capable:
            ctx.fail(("gpus", "nvswitch"), f"{gpu.model} does not sit on an NVSwitch baseboard",
                     "set gpus.nvswitch: false (NVSwitch needs an SXM model such as H100-SXM5-80GB)")
        elif not m.fabric_manager_available(os_name, method):
            ctx.fail(("driver", "method"), f"NVSwitch systems need Fabric Manager matching the driver, which "
                     f"method {method} cannot install on {os_name}", "use method cuda-repo")
        elif gpu.architecture == "blackwell":
            ctx.notes.append("NVLink 5 (Blackwell) systems also need the NVLink Subnet Manager (nvlsm)")
    check_mig(ctx, s, m, gpu)
    workers = s["image_workers"]["gpus"]
    if isinstance(workers, list) and any(index >= count for index in workers):
        ctx.fail(("image_workers", "gpus"), f"GPU index {max(workers)} does not exist on a host with {count} GPUs",
                 f"use indexes 0 to {count - 1}, or all")
    psu = s["psu_watts"]
    if psu is not None and psu < count * gpu.tdp_watts:
        ctx.fail(("psu_watts",), f"{psu} W is below the {count} x {gpu.tdp_watts} W board power of the GPUs alone",
                 f"set the real PSU capacity (>= {count * gpu.tdp_watts} W) or check gpus.count")
