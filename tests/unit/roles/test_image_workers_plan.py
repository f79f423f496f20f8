"""image_workers_plan (the collection's plugins/modules): which gpuprov-worker@ instances a host gets, pinned by
UUID in NVML (PCI bus) order, with each GPU's CPUs from a fake sysfs ``local_cpulist``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.modules import image_workers_plan

from gpuprov.lab.mocknvml import load_profile

ROOT = Path(__file__).resolve().parents[3]


plan_mod = image_workers_plan


def _facts(profile: str) -> dict[str, Any]:
    """The parts of nvml_facts' ``gpuprov_gpus`` the plan reads, from a mock NVML profile (NVML order)."""
    gpus = load_profile(profile)["gpus"]
    return {
        "available": True,
        "gpus": [
            {"index": i, "lost": False, "name": g["name"], "uuid": g["uuid"],
             "pci_bus_id_sysfs": g["pci"]["bus_id"][4:].lower()}
            for i, g in enumerate(gpus)
        ],
    }  # fmt: skip


def _sysfs(root: Path, cpulists: dict[str, str], online: str = "0-127") -> Path:
    (root / "devices/system/cpu").mkdir(parents=True)
    (root / "devices/system/cpu/online").write_text(online + "\n")
    for bus, cpus in cpulists.items():
        dev = root / "bus/pci/devices" / bus
        dev.mkdir(parents=True)
        (dev / "local_cpulist").write_text(cpus + "\n")
    return root


def test_instances_follow_nvml_order_and_pin_by_uuid(tmp_path: Path) -> None:
    facts = _facts("heterogeneous-ordering")
    buses = [g["pci_bus_id_sysfs"] for g in facts["gpus"]]
    assert buses == sorted(buses)  # the profile is in PCI bus order, as NVML enumerates
    sysfs = _sysfs(tmp_path, {buses[0]: "0-31", buses[1]: "0-31", buses[2]: "32-63", buses[3]: "64-95,96-127"})
    got = plan_mod.plan(facts, "all", str(sysfs))
    assert got["mode"] == "gpu"
    inst = got["instances"]
    assert [i["instance"] for i in inst] == ["0", "1", "2", "3", "4"]
    for i, g in zip(inst, facts["gpus"], strict=True):
        assert i["uuid"] == g["uuid"] and i["bus_id"] == g["pci_bus_id_sysfs"]
        assert i["cuda_visible_devices"] == g["uuid"] and i["gpus_arg"] == g["uuid"]  # never a bare index
    assert inst[0]["name"] == "DGX Display"
    assert [i["cpus"] for i in inst] == ["0-31", "0-31", "32-63", "64-127", "0-127"]
    assert [i["gpus_on_cpus"] for i in inst] == [2, 2, 1, 1, 1]  # GPUs 0 and 1 share a NUMA node's CPUs
    assert [i["cpu_source"] for i in inst][-2:] == ["local_cpulist", "fallback_all"]
    assert got["fallbacks"] == [{"instance": "4", "reason": got["fallbacks"][0]["reason"]}]
    assert buses[4] in got["fallbacks"][0]["reason"]


def test_operator_indexes_skip_the_display_gpu(tmp_path: Path) -> None:
    facts = _facts("heterogeneous-ordering")
    got = plan_mod.plan(facts, [4, 2, 3, 1], str(_sysfs(tmp_path, {})))
    assert [i["instance"] for i in got["instances"]] == ["1", "2", "3", "4"]
    assert all(i["name"] != "DGX Display" for i in got["instances"])
    by_uuid = plan_mod.plan(facts, facts["gpus"][2]["uuid"] + ",1", str(tmp_path))
    assert [i["instance"] for i in by_uuid["instances"]] == ["1", "2"]


def test_no_gpu_gives_one_cpu_instance_on_online_cpus(tmp_path: Path) -> None:
    sysfs = _sysfs(tmp_path, {}, online="0-3,6")
    for facts in ({"available": False, "error_name": "NVML_ERROR_LIBRARY_NOT_FOUND"}, {"available": True, "gpus": []}):
        got = plan_mod.plan(facts, "all", str(sysfs))
        assert got["mode"] == "cpu"
        assert got["instances"] == [
            {"instance": "cpu", "index": None, "uuid": None, "bus_id": None, "name": "cpu", "gpus_arg": "cpu",
             "cuda_visible_devices": "", "cpus": "0-3,6", "cpu_source": "cpu_mode", "gpus_on_cpus": 1}
        ]  # fmt: skip
    forced = plan_mod.plan(_facts("h200x2"), "cpu", str(sysfs))
    assert [i["instance"] for i in forced["instances"]] == ["cpu"]


def test_errors_and_lost_gpus(tmp_path: Path) -> None:
    facts = _facts("h200x2")
    with pytest.raises(ValueError, match="GPU '7' is not on this host"):
        plan_mod.plan(facts, [0, 7], str(tmp_path))
    with pytest.raises(ValueError, match="NVML shows none"):
        plan_mod.plan({"available": False, "error_name": "NVML_ERROR_DRIVER_NOT_LOADED"}, "0", str(tmp_path))
    facts["gpus"][1].update(lost=True, error_name="NVML_ERROR_GPU_IS_LOST")
    got = plan_mod.plan(facts, "all", str(tmp_path))
    assert [i["instance"] for i in got["instances"]] == ["0"]
    assert got["skipped"] == [{"index": 1, "reason": "GPU is lost (NVML_ERROR_GPU_IS_LOST)"}]
    with pytest.raises(ValueError, match="is lost"):
        plan_mod.plan(facts, "1", str(tmp_path))
    facts["gpus"][0]["lost"] = True
    assert plan_mod.plan(facts, "all", str(tmp_path))["instances"] == []  # no silent CPU fallback


@pytest.mark.parametrize(
    ("text", "cpus", "normal"),
    [("0-3,8", [0, 1, 2, 3, 8], "0-3,8"), ("5\n", [5], "5"), ("0-1,2-3,10-11", [0, 1, 2, 3, 10, 11], "0-3,10-11")],
)
def test_cpulist_round_trip(text: str, cpus: list[int], normal: str) -> None:
    assert plan_mod.parse_cpulist(text) == cpus
    assert plan_mod.format_cpulist(cpus) == normal


@pytest.mark.parametrize("text", ["", "\n", "a-b", "3-1", "0,,1"])
def test_cpulist_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        plan_mod.parse_cpulist(text)
