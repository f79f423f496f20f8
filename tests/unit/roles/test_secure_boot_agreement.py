"""bios_check's Secure Boot finding and nvidia_driver's refusal (roles/nvidia_driver/tasks/secure_boot.yml) agree
on which hosts fail, for every driver method, distribution, signing key pair and Secure Boot state: the role's own
expressions (the set_fact, ``__nvidia_driver_precompiled`` and the assert) rendered as Ansible would, against
:func:`findings_firmware.check_firmware`, both fed from the same fleet variables (:mod:`gpuprov.rolevars`)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.plugins.filter.core import b64decode
from ansible_collections.gpuprov.gpu.plugins.module_utils import findings_firmware as _findings_firmware
from jinja2 import StrictUndefined
from jinja2.nativetypes import NativeEnvironment

from gpuprov.rolevars import ROLE_VARIABLES

ROLE = Path(__file__).resolve().parents[3] / "roles" / "nvidia_driver"
TASKS = {task["name"]: task for task in yaml.safe_load((ROLE / "tasks" / "secure_boot.yml").read_text("utf-8"))}
FACT = TASKS["secure_boot | Set the Secure Boot state"]["ansible.builtin.set_fact"]
ASSERT = TASKS["secure_boot | Refuse to build an unsigned module on a Secure Boot host"]["ansible.builtin.assert"]
PRECOMPILED = yaml.safe_load((ROLE / "vars" / "main.yml").read_text("utf-8"))["__nvidia_driver_precompiled"]
ROLE_VARS = {var.name: var for var in ROLE_VARIABLES}
findings_firmware: Any = _findings_firmware  # Python 3.8 module_utils, untyped

METHODS = ("cuda-repo", "distro", "runfile", "ubuntu-drivers")
DISTRIBUTIONS = ("Ubuntu", "Debian")
#: secure_boot.mok_key and mok_cert as the fleet file may set them: neither, both, one alone.
KEY_PAIRS = ((None, None), ("/etc/mok/key.priv", "/etc/mok/cert.der"), ("/etc/mok/key.priv", None),
             (None, "/etc/mok/cert.der"))  # fmt: skip


def _render(text: str, ctx: dict[str, Any]) -> Any:
    env = NativeEnvironment(undefined=StrictUndefined)
    env.filters["bool"] = lambda value: value is True or str(value).lower() in ("true", "yes", "1")
    env.filters["b64decode"] = b64decode
    source = text if "{{" in text else "{{ (" + text + ") }}"
    return env.from_string(source).render(ctx)


def role_refuses(flat: dict[str, Any], secure_boot: bool, archive_precompiled: bool) -> bool:
    """Whether nvidia_driver's Secure Boot assert fails for the role variables ``flat`` maps onto."""
    ctx: dict[str, Any] = {"nvidia_driver_secure_boot": "enabled" if secure_boot else "disabled",
                           "nvidia_driver_method": ROLE_VARS["nvidia_driver_method"].value(flat),
                           "__nvidia_driver_ud": {"precompiled": archive_precompiled}}  # fmt: skip
    for name in ("nvidia_driver_mok_signing_key", "nvidia_driver_mok_certificate"):
        ctx[name] = ROLE_VARS[name].value(flat) or ""  # unset: the role default, ""
    ctx["__nvidia_driver_precompiled"] = _render(PRECOMPILED, ctx)
    for name in ("__nvidia_driver_secure_boot_enabled", "__nvidia_driver_signing"):
        ctx[name] = _render(FACT[name], {**ctx, "__nvidia_driver_one": "\x01"})
    return not all(_render(cond, ctx) for cond in ASSERT["that"])


class _Findings:
    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []

    def add(self, fid: str, severity: str, _subject: str, _evidence: str, _fix: str) -> None:
        self.found.append((fid, severity))


def bios_check_fails(flat: dict[str, Any], distribution: str, secure_boot: bool) -> list[tuple[str, str]]:
    """bios_check's findings of severity fail on a UEFI host in that Secure Boot state."""
    out = _Findings()
    plan = {"os_distribution": distribution, "driver_method": ROLE_VARS["bios_check_driver_method"].value(flat),
            "signing_key_set": ROLE_VARS["bios_check_signing_key_set"].value(flat)}  # fmt: skip
    platform = {"boot": {"mode": "uefi"}, "secure_boot": {"enabled": secure_boot, "evidence": "mokutil"}}
    findings_firmware.check_firmware(out, platform, plan)
    return [found for found in out.found if found[1] == "fail"]


@pytest.mark.parametrize(("method", "distribution", "keys", "secure_boot"),
                         [case for case in itertools.product(METHODS, DISTRIBUTIONS, KEY_PAIRS, (True, False))
                          if case[0] != "ubuntu-drivers" or case[1] == "Ubuntu"])  # validate: Ubuntu only
def test_bios_check_fails_the_hosts_nvidia_driver_refuses(method: str, distribution: str,
                                                          keys: tuple[str | None, str | None],
                                                          secure_boot: bool) -> None:  # fmt: skip
    flat = {"gpuprov_driver_method": method, "gpuprov_secure_boot_mok_key": keys[0],
            "gpuprov_secure_boot_mok_cert": keys[1]}  # fmt: skip
    refused = role_refuses(flat, secure_boot, archive_precompiled=True)
    assert bool(bios_check_fails(flat, distribution, secure_boot)) == refused
    assert refused == (secure_boot and None in keys and method != "ubuntu-drivers")  # the table's reading


def test_ubuntu_drivers_without_precompiled_modules_is_refused_by_the_role_alone() -> None:
    # Whether the archive has linux-modules-nvidia-* for every kernel is read on the host when the driver is
    # installed: bios_check, before it, reports the plan as info, naming that condition, and fails nothing.
    flat = {"gpuprov_driver_method": "ubuntu-drivers"}
    assert role_refuses(flat, secure_boot=True, archive_precompiled=False)
    assert bios_check_fails(flat, "Ubuntu", secure_boot=True) == []
