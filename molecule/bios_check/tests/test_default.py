"""The bios_check report on each platform, for its mock NVML profile (molecule.yml: h200x2 on debian12,
pcie-idle-downclock on the Ubuntu 20.04 stand-in). Both are healthy: no fail or warn finding, BAR1 256 GiB per
GPU, the boot mode "cannot tell" (a VM without EFI), and the idle Gen1 link is not flagged."""

from __future__ import annotations

import json

REPORT = "/var/lib/gpuprov/bios_check.json"
GIB = 1024**3


def report(host):
    return json.loads(host.file(REPORT).content_string)


def test_report_file(host):
    f = host.file(REPORT)
    assert f.is_file
    assert f.user == "root"
    assert f.mode == 0o644


def test_no_failing_finding(host):
    data = report(host)
    assert data["failed"] is False
    assert data["fail_on"] == ["fail"]
    assert [x["id"] for x in data["findings"] if x["severity"] in ("fail", "warn")] == []
    assert {x["id"] for x in data["findings"]} == {"boot_mode_unknown"}


def test_bar1_and_link_per_gpu(host):
    gpus = report(host)["gpus"]
    assert [(g["pci_bus_id_sysfs"], g["name"], g["bar1_total_bytes"]) for g in gpus] == [
        ("0000:00:06.0", "NVIDIA H200", 256 * GIB),
        ("0000:00:07.0", "NVIDIA H200", 256 * GIB),
    ]
    assert all(g["pcie"] == {"gen_max": 5, "gen_gpu_max": 5, "width_max": 16} for g in gpus)


def test_profile_seen_through_nvml(host):
    # the idle profile's current link is Gen1; the report keeps no live values, the mock conf says which ran
    conf = host.file("/etc/gpuprov/mock-nvml.conf").content_string
    data = report(host)
    assert data["nvml"] == {"available": True, "error_name": None, "count": 2}
    if "pcie.link_gen_current=1" in conf:
        assert not [x for x in data["findings"] if x["id"].startswith("pcie")]


def test_platform_read_from_fixture(host):
    platform = report(host)["platform"]
    assert platform["boot"]["mode"] == "unknown"
    assert platform["pci"]["gpu_functions"] == ["0000:00:06.0", "0000:00:07.0"]
    assert all(f["bar1"]["above_4g"] for f in platform["pci"]["nvidia_functions"])
