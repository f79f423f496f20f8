# Copyright: gpuprov contributors
# Apache-2.0
"""The nvidia_driver role's method ``ubuntu-drivers``: what it installs on an Ubuntu host, the one copy of the rule.

Ubuntu's ``ubuntu-drivers install --gpgpu nvidia:<branch>-server`` (ubuntu-drivers-common,
https://github.com/canonical/ubuntu-drivers-common; Ubuntu Server's "NVIDIA drivers installation",
https://documentation.ubuntu.com/server/how-to/graphics/install-nvidia-drivers/) installs the headless driver of the
named branch and, for the kernel's flavour, Canonical's precompiled and signed modules,
``linux-modules-nvidia-<branch>-server[-open]-<kernel>`` (no compiler; loadable under Secure Boot, signed by
Canonical), or the DKMS package where the archive has none. The role names the branch (never ``autoinstall``,
which takes whatever is newest) and decides the kernel side for every installed kernel, not only the running one:

* precompiled when the archive offers ``linux-modules-nvidia-<branch>-server[-open]-<kernel>`` for every installed
  kernel: the set is ``nvidia-headless-no-dkms-<branch>-server[-open]`` with the ``-server`` userland, and the
  per-kernel module packages are installed and held beside it, with the module metas of the installed kernel
  flavours (``linux-modules-nvidia-580-server-generic-hwe-24.04``), which bring the modules of the next kernel of
  that flavour;
* DKMS otherwise (one kernel without a precompiled build is enough: the host would boot it without a module):
  ``nvidia-headless-<branch>-server[-open]`` with ``nvidia-dkms-<branch>-server[-open]`` and the userland.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import driver_packages

#: The prefix of an installed kernel image meta package (linux-image-generic-hwe-24.04).
IMAGE_META_PREFIX = "linux-image-"


def gpgpu_driver(branch: Any, flavour: Any = "proprietary") -> str:
    """The driver argument of ``ubuntu-drivers install --gpgpu``: ``nvidia:580-server`` (``nvidia:580-server-open``
    for the open flavour)."""
    meta = str(driver_packages(str(branch), flavour, "ubuntu")["meta"])
    return "nvidia:" + meta.removeprefix("nvidia-driver-")


def ubuntu_drivers_plan(branch: Any, flavour: Any, kernels: Any, image_metas: Any, available: Any) -> dict[str, Any]:
    """What method ``ubuntu-drivers`` installs for driver ``branch`` in ``flavour`` on a host with installed
    ``kernels`` (versions, ``6.8.0-87-generic``) and kernel ``image_metas`` (``linux-image-generic``, ...), given the
    package names the archive offers (``available``; those of the precompiled modules are enough).

    Returns:
        ``{"driver": "nvidia:580-server", "precompiled": bool, "meta": str, "set": [str, ...],
        "kernel_packages": [str, ...], "module_metas": [str, ...], "missing": [kernel, ...]}``: ``set`` is installed
        at the driver's version, pinned and held (``meta`` first); ``kernel_packages`` (one per kernel, precompiled
        only) are installed and held at their own version, which follows the kernel's; ``module_metas`` are
        installed and left free to follow new kernels; ``missing`` names the kernels the archive has no precompiled
        module for (the reason for DKMS). No kernel at all means DKMS.
    """
    names = driver_packages(str(branch), flavour, "ubuntu")
    prefix = str(names["precompiled_prefix"])
    kernel_suffix = names["meta"].removeprefix(f"nvidia-driver-{branch}")
    offered = {str(name) for name in available}
    versions = sorted({str(k) for k in kernels if str(k)})
    missing = [k for k in versions if prefix + k not in offered]
    precompiled = bool(versions) and not missing
    flavours = sorted({str(m).removeprefix(IMAGE_META_PREFIX) for m in image_metas
                       if str(m).startswith(IMAGE_META_PREFIX)})
    if precompiled:
        meta = f"nvidia-headless-no-dkms-{branch}{kernel_suffix}"
        driver_set = [meta, *names["userland"]]
    else:
        meta = f"nvidia-headless-{branch}{kernel_suffix}"
        driver_set = [meta, names["dkms"], *names["userland"]]
    return {
        "driver": gpgpu_driver(branch, flavour),
        "precompiled": precompiled,
        "meta": meta,
        "set": driver_set,
        "kernel_packages": [prefix + k for k in versions] if precompiled else [],
        "module_metas": [prefix + f for f in flavours if prefix + f in offered] if precompiled else [],
        "missing": missing,
    }
