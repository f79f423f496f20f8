"""The nvidia_driver role's handling of NVIDIA's unbranched names (R590 and later): the role's own Jinja, rendered
here with the few Ansible filters and tests it uses, decides which installed packages belong to another branch or
flavour (a branch change needing confirmation), and writes apt preferences that keep the set on its branch by
version and never refuse the set's own meta."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.gpuprov.gpu.plugins.filter.nvidia_driver import nvidia_driver_foreign
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import driver_package_set, driver_packages
from jinja2 import StrictUndefined
from jinja2.nativetypes import NativeEnvironment

ROLE = Path(__file__).resolve().parents[3] / "roles" / "nvidia_driver"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
PLAN = next(task for task in yaml.safe_load((ROLE / "tasks" / "packages.yml").read_text())
            if task["name"] == "packages | Work out the package plan")["ansible.builtin.set_fact"]
REFUSE = next(task for task in yaml.safe_load((ROLE / "tasks" / "packages.yml").read_text())
              if task["name"].startswith("packages | Refuse the cuda meta"))["vars"]
PREFERENCES = (ROLE / "templates" / "etc" / "apt" / "preferences.d" / "gpuprov-nvidia-driver.j2").read_text()


def _env() -> NativeEnvironment:
    env = NativeEnvironment(trim_blocks=True, undefined=StrictUndefined)
    env.tests["match"] = lambda value, pattern: re.match(pattern, str(value)) is not None
    env.filters["bool"] = lambda value: value is True or str(value).lower() in ("true", "yes", "1")
    env.filters["dict2items"] = lambda mapping: [{"key": k, "value": v} for k, v in mapping.items()]
    env.filters["gpuprov.gpu.nvidia_driver_foreign"] = nvidia_driver_foreign
    return env


def _context(branch: str, flavour: str, installed: dict[str, str], method: str = "cuda-repo") -> dict[str, Any]:
    """The role's variables for ``branch``/``flavour`` on a host with ``installed`` (name -> Debian version), the
    names from the collection's rule as vars/main.yml takes them."""
    env, names = _env(), driver_packages(branch, flavour)
    ctx: dict[str, Any] = {"nvidia_driver_branch": branch, "nvidia_driver_method": method,
                           "nvidia_driver_flavour": flavour, "__nvidia_driver_source": "nvidia",
                           "__nvidia_driver_pkgs": installed, "__nvidia_driver_pinning": names["pinning"] or "",
                           "__nvidia_driver_set": driver_package_set(branch, flavour),
                           "__nvidia_driver_fm_package": driver_packages(branch)["fabric_manager"],
                           "__nvidia_driver_meta": names["meta"]}
    ctx["__nvidia_driver_unbranched"] = bool(ctx["__nvidia_driver_pinning"])
    for name in ("__nvidia_driver_unbranched_family_regex",
                 "__nvidia_driver_branch_version_regex", "__nvidia_driver_unbranched_flavour_parts",
                 "__nvidia_driver_refused", "__nvidia_driver_branch_pin"):
        value = VARS[name]
        ctx[name] = env.from_string(value).render(ctx) if isinstance(value, str) else value
    return ctx


def _plan(branch: str, flavour: str, installed: dict[str, str]) -> dict[str, Any]:
    ctx, env = _context(branch, flavour, installed), _env()
    return {key: env.from_string(PLAN[key]).render(ctx) for key in ("__nvidia_driver_foreign",
                                                                     "__nvidia_driver_installed_version")}


R580_OPEN = {"nvidia-driver-580-open": "580.159.04-0ubuntu1", "nvidia-dkms-580-open": "580.159.04-0ubuntu1",
             "libnvidia-compute-580": "580.159.04-0ubuntu1", "nvidia-utils-580": "580.159.04-0ubuntu1",
             "nvidia-compute-utils-580": "580.159.04-0ubuntu1"}
R595_OPEN = {"nvidia-driver-pinning-595": "595.71.05-1", "nvidia-open": "595.71.05-1",
             "nvidia-dkms-open": "595.71.05-1", "libnvidia-compute": "595.71.05-1", "nvidia-utils": "595.71.05-1",
             "nvidia-compute-utils": "595.71.05-1", "nvidia-kernel-common": "595.71.05-1",
             "libnvidia-container1": "1.17.8-1", "nvidia-container-toolkit": "1.17.8-1"}


def test_the_580_metas_own_dependencies_are_no_branch_change() -> None:
    """On Ubuntu, nvidia-driver-580-open pulls in more of R580 than the set names (GL, cfg1, kernel-common, the
    kernel source, the X driver): a re-run must not take them for another branch's; the proprietary flavour's meta
    and module would be another flavour's."""
    pulled = dict.fromkeys(("libnvidia-gl-580", "libnvidia-cfg1-580", "nvidia-kernel-common-580",
                            "nvidia-kernel-source-580-open", "xserver-xorg-video-nvidia-580", "libnvidia-decode-580",
                            "nvidia-firmware-580-580.159.04"), "580.159.04-0ubuntu1")
    assert _plan("580", "open", {**R580_OPEN, **pulled})["__nvidia_driver_foreign"] == []
    assert _plan("580", "proprietary", {**R580_OPEN, **pulled})["__nvidia_driver_foreign"] == [
        "nvidia-dkms-580-open", "nvidia-driver-580-open", "nvidia-kernel-source-580-open"]
    assert _plan("570", "open", {**R580_OPEN, **pulled})["__nvidia_driver_foreign"] == sorted(
        name for name in {**R580_OPEN, **pulled} if name != "nvidia-firmware-580-580.159.04")


def test_595_installed_and_wanted_is_no_change() -> None:
    plan = _plan("595", "open", R595_OPEN)
    assert plan == {"__nvidia_driver_foreign": [], "__nvidia_driver_installed_version": "595.71.05-1"}


def test_580_to_595_is_a_branch_change_by_name() -> None:
    plan = _plan("595", "open", R580_OPEN)
    assert plan["__nvidia_driver_foreign"] == sorted(R580_OPEN)
    assert plan["__nvidia_driver_installed_version"] == ""


def test_595_to_610_is_a_branch_change_by_version() -> None:
    """The same names at R595's version belong to R595: they, and R595's pinning package, are replaced; the
    container toolkit's libnvidia-container1 is no driver package. The installed version is not R610's, so the
    set is installed at a version of R610, not at 595.71.05."""
    plan = _plan("610", "open", R595_OPEN)
    assert plan["__nvidia_driver_foreign"] == sorted(
        {"nvidia-driver-pinning-595", "nvidia-open", "nvidia-dkms-open", "libnvidia-compute", "nvidia-utils",
         "nvidia-compute-utils", "nvidia-kernel-common"})
    assert plan["__nvidia_driver_installed_version"] == ""
    assert _context("610", "open", R595_OPEN)["__nvidia_driver_branch_pin"] == "610.*"


def test_595_back_to_580_is_a_branch_change() -> None:
    plan = _plan("580", "open", R595_OPEN)
    assert "nvidia-open" in plan["__nvidia_driver_foreign"] and "libnvidia-compute" in plan["__nvidia_driver_foreign"]
    assert "libnvidia-container1" not in plan["__nvidia_driver_foreign"]


def test_open_to_proprietary_on_595_is_a_flavour_change() -> None:
    plan = _plan("595", "proprietary", R595_OPEN)
    assert plan["__nvidia_driver_foreign"] == ["nvidia-dkms-open", "nvidia-open"]


def test_580_keeps_nvidias_own_pinning_package_of_the_branch() -> None:
    """NVIDIA's pinning package exists for R580 too; one a site installed for the wanted branch is no change."""
    plan = _plan("580", "open", {**R580_OPEN, "nvidia-driver-pinning-580": "580.159.04-1"})
    assert plan["__nvidia_driver_foreign"] == []


@pytest.mark.parametrize(("branch", "flavour", "refused"), [
    ("595", "proprietary", []),  # cuda-drivers is the set's own meta
    ("595", "open", ["cuda-drivers"]),
    ("580", "proprietary", ["cuda-drivers"]),
])
def test_cuda_drivers_is_refused_unless_it_is_the_sets_meta(branch: str, flavour: str, refused: list[str]) -> None:
    ctx = _context(branch, flavour, {"cuda-drivers": f"{branch}.71.05-1"})
    assert _env().from_string(REFUSE["__nvidia_driver_refused_installed"]).render(ctx) == refused


def _preferences(branch: str, flavour: str, version: str) -> str:
    ctx = _context(branch, flavour, {})
    pin_version = version or ctx["__nvidia_driver_branch_pin"]
    ctx.update(__nvidia_driver_pin_version=pin_version,
               __nvidia_driver_pin_names=ctx["__nvidia_driver_set"] if pin_version else [], ansible_managed="x")
    return str(_env().from_string(PREFERENCES).render(ctx))


def _stanzas(text: str) -> list[dict[str, str]]:
    blocks = [line for line in text.split("\n\n") if "Package:" in line]
    return [dict(line.split(": ", 1) for line in b.splitlines() if not line.startswith("#")) for b in blocks]


def test_preferences_pin_the_unbranched_set_to_its_branch_before_a_version_is_known() -> None:
    stanzas = _stanzas(_preferences("595", "proprietary", ""))
    pinned = {s["Package"]: (s["Pin"], s["Pin-Priority"]) for s in stanzas if s["Pin-Priority"] == "1001"}
    assert pinned == dict.fromkeys(driver_package_set("595", "proprietary"), ("version 595.*", "1001"))
    refused = next(s for s in stanzas if s["Pin-Priority"] == "-1")["Package"].split()
    assert "cuda-drivers" not in refused and "cuda" in refused and "cuda-drivers-[0-9]*" in refused
    assert not any(s["Package"] == "cuda-drivers-595" for s in stanzas)


def test_preferences_pin_the_installed_version_once_known() -> None:
    stanzas = _stanzas(_preferences("595", "open", "595.71.05-1"))
    pinned = {s["Package"]: s["Pin"] for s in stanzas if s["Pin-Priority"] == "1001"}
    assert pinned == dict.fromkeys(driver_package_set("595", "open"), "version 595.71.05-1")
    assert "cuda-drivers" in next(s for s in stanzas if s["Pin-Priority"] == "-1")["Package"].split()


def test_preferences_of_branched_names_are_unchanged() -> None:
    """R580: no pin before a version is known, cuda-drivers-580 at its branch, every cuda meta refused."""
    stanzas = _stanzas(_preferences("580", "open", ""))
    assert [(s["Package"], s["Pin"], s["Pin-Priority"]) for s in stanzas] == [
        ("cuda-drivers-580", "version 580.*", "500"),
        ("cuda cuda-drivers cuda-drivers-[0-9]* cuda-runtime-[0-9]*-[0-9]* cuda-[0-9]*-[0-9]*", "version *", "-1")]
