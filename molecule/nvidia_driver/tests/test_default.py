"""Real state after the nvidia_driver role: the driver set at its version and held, the module DKMS built for
the host's kernel, nvidia-persistenced running, and no Fabric Manager on a host without NVSwitch.

A container shares the host's kernel: the module is built and found by ``modinfo -k``, never loaded.
"""

from __future__ import annotations

import json
import re

VERSION = "535.183.01"
SET = ("nvidia-driver-535", "nvidia-dkms-535", "libnvidia-compute-535", "nvidia-utils-535",
       "nvidia-compute-utils-535")


def kernel(host):
    return json.loads(host.file("/etc/ansible/facts.d/gpuprov.fact").content_string)["booted_kernel"]


def test_driver_set_is_installed_at_the_version_and_held(host):
    held = set(host.check_output("apt-mark showhold").split())
    for name in SET:
        package = host.package(name)
        assert package.is_installed, name
        assert package.version.startswith(VERSION + "-"), (name, package.version)
        assert name in held, name
    assert f"linux-image-{kernel(host)}" in held


def test_newer_candidates_are_pinned_out_and_cuda_is_refused(host):
    policy = host.check_output("apt-cache policy nvidia-driver-535 cuda cuda-drivers-580")
    assert f"Candidate: {VERSION}-0ubuntu1" in policy
    assert "cuda:\n  Installed: (none)\n  Candidate: (none)" in policy
    assert not host.package("cuda").is_installed


def test_module_is_built_for_the_kernel(host):
    k = kernel(host)
    assert host.check_output(f"modinfo -k {k} -F version nvidia") == VERSION
    # dkms 3 (bookworm) prints "nvidia/V, K, x86_64: installed"; dkms 2.8 (bullseye, focal) "nvidia, V, K, ..."
    status = host.check_output("dkms status")
    assert re.search(rf"^nvidia[/,] ?{re.escape(VERSION)}, {re.escape(k)}, x86_64: installed$", status, re.M), status


def test_persistence_daemon_runs(host):
    service = host.service("nvidia-persistenced")
    assert service.is_running
    assert service.is_enabled


def test_no_fabric_manager_without_nvswitch(host):
    assert not host.package("nvidia-fabricmanager-535").is_installed
    assert not host.file("/lib/systemd/system/nvidia-fabricmanager.service").exists
