"""The fleet's ``gpuprov_*`` settings variables, mapped onto the collection roles' own variables.

Each role's interface is its role-prefixed variables (``roles/<role>/meta/argument_specs.yml``); their defaults
are plain values, so a role works from an admin's own playbook. gpuprov maps its fleet settings onto them here,
in one table: :func:`role_variables` turns the flat ``gpuprov_*`` variables of one host (:func:`gpuprov.render.
flatten`) into the role variables for that host. The renderer writes them into ``host_vars/<host>.yml``, and a
run's ``-e gpuprov_*`` overrides go through the same table (:func:`with_role_variables`).

A setting that is unset (``None``) or empty gives no role variable, so the role's own default applies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: How Ansible spells true (ansible.module_utils.parsing.convert_bool.BOOLEANS_TRUE); ``-e`` values are strings.
_TRUE = ("y", "yes", "on", "1", "true", "t")


def is_true(value: Any) -> bool:
    """Whether ``value`` (a bool or an ``-e`` string) is true as Ansible's ``bool`` filter reads it."""
    return value is True or (isinstance(value, str) and value.strip().lower() in _TRUE)


def _blank(value: Any) -> bool:
    return value is None or value == ""


@dataclass(frozen=True)
class RoleVar:
    """One role variable: its name, the ``gpuprov_*`` variables it is computed from and how.

    ``convert`` takes the source values in order (each may be ``None`` when unset) and returns the role
    variable's value, or ``None`` to leave the role default; without it the one source is copied.
    """

    name: str
    sources: tuple[str, ...]
    convert: Callable[..., Any] | None = None

    def value(self, flat: Mapping[str, Any]) -> Any:
        values = [flat.get(source) for source in self.sources]
        if self.convert is not None:
            return self.convert(*values)
        return values[0]


def _engines(runtime: Any) -> list[str] | None:
    """``container_runtime`` -> the engines the toolkit configures (docker brings containerd as its backend)."""
    return None if _blank(runtime) else {"docker": ["docker"], "containerd": ["containerd"]}.get(str(runtime), [])


def _signing_key_set(key: Any, cert: Any) -> bool:
    return not _blank(key) and not _blank(cert)


def _fabric_manager(nvswitch: Any) -> str | None:
    """``gpus.nvswitch`` true requires Fabric Manager; otherwise the role's auto (NVML's NVSwitch links) decides."""
    return "enabled" if is_true(nvswitch) else None


def _copy(name: str, source: str) -> RoleVar:
    return RoleVar(name, (f"gpuprov_{source}",))


def _same(role: str, *keys: str) -> list[RoleVar]:
    """Role variables named like their settings: ``<role>_<key>`` from ``gpuprov_<role>_<key>``."""
    return [_copy(f"{role}_{key}", f"{role}_{key}") for key in keys]


ROLE_VARIABLES: tuple[RoleVar, ...] = (
    *_same("bios_check", "fail_on", "severity", "min_ram_gb", "cpu_tdp_watts", "psu_headroom_pct",
           "load_utilization_pct", "min_bar1_mib", "pcie_width", "pcie_gen", "vfio_hypervisor"),
    _copy("bios_check_psu_watts", "psu_watts"),
    _copy("bios_check_expected_gpu_model", "gpus_model"),
    _copy("bios_check_expected_gpu_count", "gpus_count"),
    _copy("bios_check_driver_method", "driver_method"),
    _copy("bios_check_driver_branch", "driver_branch"),
    RoleVar("bios_check_signing_key_set", ("gpuprov_secure_boot_mok_key", "gpuprov_secure_boot_mok_cert"),
            _signing_key_set),
    _copy("nouveau_reboot_ok", "reboot_allowed"),
    _copy("hwe_kernel_reboot_ok", "reboot_allowed"),
    _copy("hwe_kernel_hold", "kernel_hold"),
    _copy("nvidia_driver_kernel_hold", "kernel_hold"),
    _copy("nvidia_driver_branch", "driver_branch"),
    _copy("nvidia_driver_flavour", "driver_flavour"),
    _copy("nvidia_driver_package_version", "driver_version"),
    _copy("nvidia_driver_method", "driver_method"),
    _copy("nvidia_driver_branch_change_ok", "driver_allow_branch_change"),
    _copy("nvidia_driver_runfile_url", "driver_runfile_url"),
    _copy("nvidia_driver_runfile_sha256", "driver_runfile_sha256"),
    _copy("nvidia_driver_replace_packaged", "driver_replace_packaged"),
    RoleVar("nvidia_driver_fabric_manager", ("gpuprov_gpus_nvswitch",), _fabric_manager),
    _copy("nvidia_driver_mok_signing_key", "secure_boot_mok_key"),
    _copy("nvidia_driver_mok_certificate", "secure_boot_mok_cert"),
    _copy("nvidia_driver_distro_repo_url", "mirrors_distro_repo_url"),
    _copy("nvidia_driver_cuda_repo_url", "mirrors_cuda_repo_url"),
    _copy("nvidia_driver_cuda_repo_key_fingerprint", "mirrors_cuda_repo_key_fingerprint"),
    _copy("cuda_version", "cuda_version"),
    *_same("cuda", "method", "runfile_url", "runfile_sha256"),
    _copy("cuda_repo_url", "mirrors_cuda_repo_url"),
    _copy("cuda_repo_key_fingerprint", "mirrors_cuda_repo_key_fingerprint"),
    _copy("cudnn_version", "cudnn_version"),
    *_same("cudnn", "method", "archive_url", "archive_sha256"),
    _copy("cudnn_cuda_version", "cuda_version"),
    _copy("nccl_version", "nccl_version"),
    _copy("nccl_cuda_version", "cuda_version"),
    _copy("mig_layout", "mig_layout"),
    _copy("mig_layouts", "mig_layouts"),
    RoleVar("container_toolkit_engines", ("gpuprov_container_runtime",), _engines),
    _copy("container_toolkit_repo_url", "mirrors_container_toolkit_repo_url"),
    _copy("container_toolkit_repo_key_fingerprint", "mirrors_container_toolkit_key_fingerprint"),
    _copy("container_toolkit_docker_repo_url", "mirrors_docker_repo_url"),
    _copy("container_toolkit_docker_repo_key_fingerprint", "mirrors_docker_key_fingerprint"),
    *_same("monitoring", "enabled", "dcgm_version", "dcgm_exporter_version", "dcgm_exporter_url",
           "dcgm_exporter_sha256", "dcgm_exporter_image", "node_exporter"),
    *_same("image_workers", "enabled", "gpus", "queue", "batch", "procs_per_gpu", "mps"),
    _copy("verify_expected_gpu_model", "gpus_model"),
    _copy("verify_expected_gpu_count", "gpus_count"),
    _copy("verify_nvswitch", "gpus_nvswitch"),
    _copy("verify_kernel_hold", "kernel_hold"),
    _copy("verify_expected_driver_branch", "driver_branch"),
    _copy("verify_expected_driver_version", "driver_version"),
    _copy("verify_expected_driver_flavour", "driver_flavour"),
    _copy("verify_expected_cuda_version", "cuda_version"),
    _copy("verify_expected_cudnn_version", "cudnn_version"),
    _copy("verify_expected_nccl_version", "nccl_version"),
    _copy("verify_expected_cuda_method", "cuda_method"),
    _copy("verify_expected_cuda_runfile_sha256", "cuda_runfile_sha256"),
    _copy("verify_expected_cudnn_method", "cudnn_method"),
    _copy("verify_expected_cudnn_archive_sha256", "cudnn_archive_sha256"),
    _copy("verify_container_runtime", "container_runtime"),
    _copy("verify_mig_layout", "mig_layout"),
    _copy("verify_mig_layouts", "mig_layouts"),
    _copy("verify_skip", "verify_skip"),
    _copy("verify_nccl_min_busbw_gbps", "verify_min_busbw_gbps"),
    *_same("verify", "nccl_size_bytes", "python", "container_image", "container_pull"),
)


def role_variables(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Flat ``gpuprov_*`` variables of one host -> the role variables they set (unset or empty ones left out).

    Only variables whose sources appear in ``flat`` are computed, so a partial mapping (a run's ``-e``
    overrides) gives only the role variables it touches.
    """
    out: dict[str, Any] = {}
    for var in ROLE_VARIABLES:
        if not any(source in flat for source in var.sources):
            continue
        value = var.value(flat)
        if not _blank(value):
            out[var.name] = value
    return out


def with_role_variables(extravars: Mapping[str, Any]) -> dict[str, Any]:
    """``extravars`` plus the role variables its ``gpuprov_*`` entries map onto (an explicit role variable wins)."""
    return {**role_variables(extravars), **extravars}
