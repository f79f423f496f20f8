"""kernel_metas and kernel_hold_plan: which kernel packages kernel.hold holds, and which holds gpuprov may release."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.filter.kernel_hold import FilterModule, kernel_hold_plan
from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import kernel_metas

UBUNTU = {
    # GA and HWE lines, a cloud flavour: each image/headers meta and its top-level linux-<flavour>
    "linux-generic": "5.15.0.119.119", "linux-image-generic": "5.15.0.119.119",
    "linux-headers-generic": "5.15.0.119.119",
    "linux-generic-hwe-22.04": "6.8.0-45.45~22.04.1", "linux-image-generic-hwe-22.04": "6.8.0-45.45~22.04.1",
    "linux-headers-generic-hwe-22.04": "6.8.0-45.45~22.04.1",
    "linux-image-aws": "5.15.0.1060.60",
    # a kernel's own packages, Ubuntu's flavourless headers half and other linux-* packages are no metas
    "linux-image-5.15.0-119-generic": "5.15.0-119.129", "linux-image-unsigned-6.8.0-45-generic": "6.8.0-45.45",
    "linux-headers-5.15.0-119": "5.15.0-119.129", "linux-headers-5.15.0-119-generic": "5.15.0-119.129",
    "linux-modules-5.15.0-119-generic": "5.15.0-119.129", "linux-firmware": "20220329.git681281e4-0ubuntu3",
    "linux-base": "4.5ubuntu9", "linux-libc-dev": "5.15.0-119.129", "linux-tools-common": "5.15.0-119.129",
}
DEBIAN = {
    "linux-image-amd64": "6.1.119-1", "linux-headers-amd64": "6.1.119-1", "linux-image-cloud-amd64": "6.1.119-1",
    "linux-image-rt-amd64": "6.1.119-1", "linux-headers-rt-amd64": "6.1.119-1",
    "linux-image-6.1.0-28-amd64": "6.1.119-1", "linux-headers-6.1.0-28-common": "6.1.119-1",
    "linux-headers-6.1.0-28-amd64": "6.1.119-1", "linux-kbuild-6.1": "6.1.119-1",
}


def test_kernel_metas_of_ubuntu_and_debian() -> None:
    assert kernel_metas(UBUNTU) == [
        "linux-generic", "linux-generic-hwe-22.04", "linux-headers-generic", "linux-headers-generic-hwe-22.04",
        "linux-image-aws", "linux-image-generic", "linux-image-generic-hwe-22.04",
    ]
    assert kernel_metas(DEBIAN) == ["linux-headers-amd64", "linux-headers-rt-amd64", "linux-image-amd64",
                                    "linux-image-cloud-amd64", "linux-image-rt-amd64"]
    assert kernel_metas({"linux-image-6.1.0-28-amd64": "6.1.119-1"}) == []


def _state(versions: dict[str, str], held: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """A deb_packages result: every package installed, those in ``held`` held."""
    return {"versions": versions, "selections": {n: "hold" if n in held else "install" for n in versions}}


def _record(*names: str) -> str:
    return json.dumps({"held": list(names)})


def test_hold_records_only_the_holds_gpuprov_makes() -> None:
    # the admin held linux-image-amd64 before: it is not gpuprov's, so it is neither held again nor recorded
    plan = kernel_hold_plan(_state(DEBIAN, ("linux-image-amd64",)), True, "")
    assert plan["hold"] == ["linux-headers-amd64", "linux-headers-rt-amd64", "linux-image-cloud-amd64",
                            "linux-image-rt-amd64"]
    assert plan["release"] == [] and plan["record"] == plan["hold"]
    # everything held, gpuprov's holds recorded: nothing to do, the record unchanged
    metas = kernel_metas(DEBIAN)
    plan = kernel_hold_plan(_state(DEBIAN, tuple(metas)), True, _record(*plan["hold"]))
    assert (plan["hold"], plan["release"], plan["record"]) == ([], [], sorted(set(metas) - {"linux-image-amd64"}))


def test_hold_after_an_admin_lifted_it_and_updated_the_kernel() -> None:
    """apt-mark unhold linux-generic-hwe-22.04 linux-image-... and an apt upgrade: the next run holds them again
    (the module for the new kernel is built before, by the nvidia_driver role)."""
    recorded = _record("linux-generic-hwe-22.04", "linux-headers-generic-hwe-22.04", "linux-image-generic-hwe-22.04")
    state = _state(UBUNTU, ("linux-headers-generic-hwe-22.04",))
    plan = kernel_hold_plan(state, "true", recorded)
    assert plan["hold"] == [m for m in kernel_metas(UBUNTU) if m != "linux-headers-generic-hwe-22.04"]
    assert plan["record"] == kernel_metas(UBUNTU)


def test_release_and_lift_touch_only_gpuprov_holds() -> None:
    metas = tuple(kernel_metas(UBUNTU))
    recorded = _record("linux-generic", "linux-image-generic", "linux-headers-generic", "linux-removed-meta")
    # hold false: the recorded names still installed and held are released (the removed one, held but not
    # installed, is left alone: selection install would mark it for installation); the admin's holds on the HWE
    # and aws metas stay; the record goes
    state = _state(UBUNTU, metas)
    state["selections"]["linux-removed-meta"] = "hold"
    plan = kernel_hold_plan(state, False, recorded)
    assert plan["release"] == ["linux-generic", "linux-headers-generic", "linux-image-generic"]
    assert (plan["hold"], plan["record"]) == ([], [])
    # lift for hwe_kernel's own install: the same release, the record kept for the hold applied after it
    lifted = kernel_hold_plan(_state(UBUNTU, metas), True, recorded, True)
    assert lifted["release"] == plan["release"] and lifted["hold"] == []
    assert lifted["record"] == sorted(json.loads(recorded)["held"])
    # no record: nothing gpuprov may release
    assert kernel_hold_plan(_state(UBUNTU, metas), False, "")["release"] == []


@pytest.mark.parametrize("record", ["{", "[]", '{"held": "linux-generic"}', '{"held": [1]}'])
def test_a_broken_record_is_an_error_with_the_fix(record: str) -> None:
    with pytest.raises(AnsibleFilterError, match="delete the file"):
        kernel_hold_plan(_state(UBUNTU), False, record)


def test_state_without_selections_is_an_error() -> None:
    with pytest.raises(AnsibleFilterError, match="'versions' and 'selections'"):
        kernel_hold_plan({"versions": UBUNTU}, True)
    assert FilterModule().filters() == {"kernel_hold_plan": kernel_hold_plan}
