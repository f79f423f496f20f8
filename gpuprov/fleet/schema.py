"""Pydantic v2 models of the fleet file (version 1); field docs live in docs/fleet-file.md.

One :class:`Settings` model serves every layer (fleet, group, host): each field has its schema default,
a layer is validated alone and dumped with ``exclude_unset`` so only what it sets takes part in the
merge, and the merged settings are validated again to fill in the defaults. Unknown keys are errors
(``extra="forbid"``) and types are strict (no ``"22"`` for a port). Cross-field and hardware checks
are not here but in :mod:`gpuprov.fleet.checks`, because they need the merged settings.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuprov.fleet.addresses import Address
from gpuprov.fleet.types import (
    AllOrIndexes,
    AutoOrPositive,
    Branch,
    CudaVersion,
    DcgmExporterVersion,
    DownloadUrlOrEnv,
    DriverVersion,
    FilePath,
    FindingId,
    Fingerprint,
    GroupName,
    HostPath,
    LibVersion,
    Name,
    PcieGen,
    PcieWidth,
    Port,
    Secret,
    Sha256,
    Url,
    UrlOrEnv,
    User,
    WorkerGpus,
)

OsName = Literal["ubuntu2004", "ubuntu2204", "ubuntu2404", "debian12"]
PositiveInt = Annotated[int, Field(ge=1)]


class Strict(BaseModel):
    """Base: unknown keys are errors, no type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Gpus(Strict):
    """Expected GPUs: ``model`` (a row of the matrix), ``count`` per host, ``nvswitch`` baseboard."""

    model: Name | None = None
    count: Annotated[int, Field(ge=1, le=64)] | None = None  # 64: far above any one server (HGX: 8, DGX-2: 16)
    nvswitch: bool = False


class Driver(Strict):
    """NVIDIA driver: ``branch`` ("580" or auto), exact ``version``, module ``flavour`` and install ``method``;
    ``allow_branch_change`` confirms replacing another installed branch or flavour (unhold, purge, install and
    hold the new set; without it the role stops with the plan), rendered as ``gpuprov_driver_allow_branch_change``.
    Method runfile: NVIDIA's ``.run`` installer from ``runfile_url`` (http(s), file or ``{env: NAME}``), checked
    against ``runfile_sha256`` before it runs; ``replace_packaged`` lets it purge a driver installed from packages
    first (without it the role stops naming them)."""

    branch: Branch = "auto"
    version: DriverVersion | None = None
    flavour: Literal["auto", "open", "proprietary"] = "auto"
    method: Literal["cuda-repo", "distro", "ubuntu-drivers", "runfile"] = "cuda-repo"
    runfile_url: DownloadUrlOrEnv | None = None
    runfile_sha256: Sha256 | None = None
    replace_packaged: bool = False
    allow_branch_change: bool = False


class Cuda(Strict):
    """CUDA toolkit version (major.minor[.patch]; null installs no toolkit) and how: ``cuda-repo`` (the
    ``cuda-toolkit-X-Y`` package) or ``runfile`` (NVIDIA's ``cuda_<version>_<driver>_linux.run`` from
    ``runfile_url``, checked against ``runfile_sha256``, toolkit only)."""

    version: CudaVersion | None = None
    method: Literal["cuda-repo", "runfile"] = "cuda-repo"
    runfile_url: UrlOrEnv | None = None
    runfile_sha256: Sha256 | None = None


class Library(Strict):
    """A CUDA library version (cuDNN, NCCL); null installs none."""

    version: LibVersion | None = None


class Cudnn(Library):
    """cuDNN: ``version`` and how: ``cuda-repo`` (NVIDIA's packages) or ``archive`` (NVIDIA's
    ``cudnn-linux-x86_64-<version>_cuda<major>-archive.tar.xz`` from ``archive_url``, checked against
    ``archive_sha256``, unpacked into the toolkit)."""

    method: Literal["cuda-repo", "archive"] = "cuda-repo"
    archive_url: UrlOrEnv | None = None
    archive_sha256: Sha256 | None = None


class MigDevices(Strict):
    """One mig-parted style entry: which GPUs, MIG on or off, and the profile counts."""

    devices: AllOrIndexes = "all"
    mig_enabled: bool = True
    mig_devices: dict[Name, PositiveInt] = {}


class Mig(Strict):
    """MIG: ``layout`` names one of ``layouts`` to apply (null leaves MIG alone)."""

    layout: Name | None = None
    layouts: dict[Name, list[MigDevices]] = {}


class Monitoring(Strict):
    """DCGM, dcgm-exporter and node_exporter."""

    enabled: bool = True
    dcgm_version: LibVersion | None = None
    dcgm_exporter_image: Name | None = None
    # "<dcgm>-<exporter>", e.g. 3.3.5-3.4.1; its DCGM part must be dcgm_version (docs/monitoring.md)
    dcgm_exporter_version: DcgmExporterVersion | None = None
    dcgm_exporter_url: UrlOrEnv | None = None
    dcgm_exporter_sha256: Sha256 | None = None
    node_exporter: bool = True


class Proxy(Strict):
    """HTTP(S) proxy for package and image downloads; URLs with credentials only as ``{env: NAME}``."""

    http: UrlOrEnv | None = None
    https: UrlOrEnv | None = None
    no_proxy: list[Name] = []


class Mirrors(Strict):
    """Package mirrors and the fingerprints of their signing keys (air-gapped sites)."""

    cuda_repo_url: UrlOrEnv | None = None
    cuda_repo_key_fingerprint: Fingerprint | None = None
    container_toolkit_repo_url: UrlOrEnv | None = None
    container_toolkit_key_fingerprint: Fingerprint | None = None
    docker_repo_url: UrlOrEnv | None = None
    docker_key_fingerprint: Fingerprint | None = None
    distro_repo_url: UrlOrEnv | None = None  # driver.method distro on Debian: the Debian archive (mirror)


class Reboot(Strict):
    """Whether gpuprov may reboot hosts, and how many at a time."""

    allowed: bool = False
    serial: PositiveInt = 1


class Kernel(Strict):
    """The host's kernel line: ``hold`` holds the installed kernel meta packages (linux-image-amd64, linux-generic,
    linux-generic-hwe-22.04, ...) once the driver module is built for every kernel the host can boot, so ``apt
    upgrade`` brings no kernel without one; false releases only the holds gpuprov recorded (docs/kernel-dkms.md)."""

    hold: bool = False


class ImageWorkers(Strict):
    """Image-processing workers: on/off, which GPUs (all, cpu or indexes), queue name, batch size (auto:
    decided at run time), worker processes per GPU (auto: chosen by each worker service from its CPUs and
    its GPU's memory, :func:`gpuprov.images.sizing.fast_defaults`, whose source is docs/benchmarks.md) and
    whether each service runs its GPU's workers under a CUDA MPS daemon of its own (:mod:`gpuprov.images.mps`)."""

    enabled: bool = False
    gpus: WorkerGpus = "all"
    queue: Name | None = None
    batch: AutoOrPositive = "auto"
    procs_per_gpu: AutoOrPositive = "auto"
    mps: Literal["auto", "on", "off"] = "auto"


class SecureBoot(Strict):
    """Module signing under Secure Boot: the site's MOK key pair (paths on the host; the key is never logged)."""

    mok_key: HostPath | None = None
    mok_cert: HostPath | None = None


Severity = Literal["fail", "warn", "info"]


class BiosCheck(Strict):
    """bios_check thresholds: which severities fail a host, RAM, PSU headroom, load, BAR1, the PCIe link each GPU's
    slot is built for (lanes; generation, auto: the GPU's own) and severity overrides."""

    fail_on: list[Severity] = ["fail"]
    min_ram_gb: PositiveInt = 64
    cpu_tdp_watts: Annotated[int, Field(ge=0)] = 700
    psu_headroom_pct: Annotated[int, Field(ge=0, le=200)] = 25
    load_utilization_pct: Annotated[int, Field(ge=1, le=100)] = 50
    min_bar1_mib: AutoOrPositive = "auto"
    pcie_width: PcieWidth = 16
    pcie_gen: PcieGen = "auto"
    vfio_hypervisor: bool = False
    severity: dict[FindingId, Severity] = {}


#: The verification ladder's steps, in its order (STEPS of plugins/module_utils/ladder.py).
VerifyStep = Literal["gpus", "nvidia_smi", "driver_version", "persistence", "fabric_manager", "services", "mig",
                     "cuda_sample", "p2p", "nccl_allreduce", "container", "dcgm_diag"]


class Verify(Strict):
    """verify: steps not to run (reported as skip), NCCL all-reduce busbw floor in GB/s (auto: per GPU model),
    its buffer in bytes, the Python with torch, the container smoke-test image and whether the role may pull it
    (docs/verify.md)."""

    skip: list[VerifyStep] = []
    min_busbw_gbps: AutoOrPositive = "auto"
    nccl_size_bytes: Annotated[int, Field(ge=1048576)] = 1073741824
    python: FilePath | None = None
    container_image: Name | None = None
    container_pull: bool = False


class Settings(Strict):
    """Settings of one layer (fleet, group or host) or, after the merge, of one host."""

    os: OsName | None = None
    gpus: Gpus = Gpus()
    driver: Driver = Driver()
    cuda: Cuda = Cuda()
    cudnn: Cudnn = Cudnn()
    nccl: Library = Library()
    container_runtime: Literal["docker", "containerd", "none"] = "docker"
    mig: Mig = Mig()
    monitoring: Monitoring = Monitoring()
    proxy: Proxy = Proxy()
    mirrors: Mirrors = Mirrors()
    reboot: Reboot = Reboot()
    kernel: Kernel = Kernel()
    psu_watts: PositiveInt | None = None
    image_workers: ImageWorkers = ImageWorkers()
    secure_boot: SecureBoot = SecureBoot()
    bios_check: BiosCheck = BiosCheck()
    verify: Verify = Verify()


class Ssh(Strict):
    """Connection defaults for every host."""

    user: User | None = None
    port: Port = 22
    key: FilePath | None = None
    become: bool = True
    become_password: Secret | None = None
    known_hosts: FilePath | None = None
    host_key_checking: bool = True


class Group(Strict):
    """A group of hosts sharing settings."""

    description: str | None = None
    settings: Settings | None = None


class HostEntry(Strict):
    """One host: how to reach it, its groups (in precedence order, later wins), its own settings and whether it is
    a canary (``gpuprov upgrade`` moves canaries first, one at a time)."""

    address: Address
    port: Port | None = None
    user: User | None = None
    key: FilePath | None = None
    become: bool | None = None
    become_password: Secret | None = None
    description: str | None = None
    canary: bool = False
    groups: list[GroupName] = []
    settings: Settings | None = None


#: top-level keys of a fleet file and whether each is required
TOP_LEVEL: dict[str, bool] = {
    "version": True,
    "name": False,
    "ssh": False,
    "settings": False,
    "groups": False,
    "hosts": True,
}

#: unused import guard for types only referenced in annotations of other modules
__all__ = [
    "TOP_LEVEL",
    "Group",
    "HostEntry",
    "OsName",
    "Settings",
    "Ssh",
    "Url",
]
