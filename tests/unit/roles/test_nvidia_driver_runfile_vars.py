"""The nvidia_driver role's runfile rules in vars/main.yml, rendered by Ansible's own templating: the installer's
flags per branch, flavour and signing plan, and which installed packages count as a packaged driver."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROOT = Path(__file__).resolve().parents[3]
BASE = ["--silent", "--ui=none", "--no-questions", "--dkms", "--no-opengl-files", "--skip-module-load"]


def _render(expression: str, **inputs: Any) -> Any:
    role_vars = yaml.safe_load((ROOT / "roles" / "nvidia_driver" / "vars" / "main.yml").read_text(encoding="utf-8"))
    variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in role_vars.items()}
    variables.update(
        {
            "nvidia_driver_flavour": "proprietary",
            "nvidia_driver_package_version": "580.105.08",
            "nvidia_driver_mok_signing_key": "",
            "nvidia_driver_mok_certificate": "",
            "nvidia_driver_runfile_cache_dir": "/var/cache/gpuprov/nvidia-runfile",
            **inputs,
        }
    )
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


@pytest.mark.parametrize(
    ("branch", "flavour", "module_flags"),
    [
        ("580", "proprietary", ["--kernel-module-type=proprietary"]),
        ("580", "open", ["--kernel-module-type=open"]),
        ("580", "auto", ["--kernel-module-type=proprietary"]),  # auto unresolved outside a fleet means proprietary
        ("560", "open", ["--kernel-module-type=open"]),
        ("550", "open", ["--kernel-module-build-directory=kernel-open"]),
        ("535", "proprietary", []),
    ],
)
def test_module_type_flag_follows_the_branch_and_flavour(branch: str, flavour: str, module_flags: list[str]) -> None:
    flags = _render("{{ __nvidia_driver_runfile_flags }}", nvidia_driver_branch=branch, nvidia_driver_flavour=flavour)
    assert flags == BASE + module_flags


def test_kernel_name_and_signing_keys_are_passed() -> None:
    flags = _render(
        "{{ __nvidia_driver_runfile_flags }}",
        nvidia_driver_branch="580",
        __nvidia_driver_running_kernel="6.1.0-28-amd64",
        __nvidia_driver_signing=True,
        nvidia_driver_mok_signing_key="/root/mok/MOK.priv",
        nvidia_driver_mok_certificate="/root/mok/MOK.der",
    )
    assert flags == [
        *BASE,
        "--kernel-name=6.1.0-28-amd64",
        "--kernel-module-type=proprietary",
        "--module-signing-secret-key=/root/mok/MOK.priv",
        "--module-signing-public-key=/root/mok/MOK.der",
    ]


def test_runfile_is_kept_under_nvidias_name() -> None:
    assert _render("{{ __nvidia_driver_runfile_path }}", nvidia_driver_branch="580") == (
        "/var/cache/gpuprov/nvidia-runfile/NVIDIA-Linux-x86_64-580.105.08.run"
    )


@pytest.mark.parametrize(
    ("name", "packaged"),
    [
        ("nvidia-driver-580", True),
        ("nvidia-driver-580-open", True),
        ("libnvidia-compute-535-server", True),
        ("nvidia-dkms-570", True),
        ("cuda-drivers-580", True),
        ("cuda-drivers", True),
        ("nvidia-driver", True),
        ("nvidia-kernel-dkms", True),
        ("libcuda1", True),
        ("nvidia-persistenced", True),
        ("libnvidia-container1", False),
        ("libnvidia-container-tools", False),
        ("nvidia-container-toolkit", False),
        ("cuda-toolkit-12-8", False),
        ("datacenter-gpu-manager", False),
    ],
)
def test_packaged_driver_names(name: str, packaged: bool) -> None:
    regex = _render("{{ __nvidia_driver_runfile_packaged_regex }}", nvidia_driver_branch="580")
    assert bool(re.search(regex, name)) is packaged
