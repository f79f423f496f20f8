"""Xid and SXid events from recorded kernel-log lines (tests/data/kernel-log): the catalogue's class of each,
the counts, the doctor diagnoses per GPU with their action, and a kernel log that cannot be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import doctor as rules
from ansible_collections.gpuprov.gpu.plugins.module_utils import platform_kernel_log as klog
from ansible_collections.gpuprov.gpu.plugins.module_utils import xid

LOG = Path(__file__).resolve().parents[1] / "data" / "kernel-log" / "gpu-health.log"


def _events() -> list[dict[str, Any]]:
    return klog.kernel_log(str(LOG), commands=False)["events"]


def _by_code() -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for event in _events():
        if event["kind"] == "xid":
            out.setdefault(event["xid"], []).append(event)
    return out


@pytest.mark.parametrize(("code", "klass"), [
    (13, "application"), (31, "application"), (43, "application"), (45, "application"), (94, "application"),
    (63, "informational"), (92, "informational"),
    (48, "reset_gpu"), (64, "reset_gpu"), (74, "reset_gpu"), (95, "reset_gpu"), (119, "reset_gpu"),
    (120, "reset_gpu"),
    (79, "reboot"),
    (54, "contact_support"),
    (999, "unknown"),
])
def test_each_recorded_xid_gets_its_catalogue_class(code: int, klass: str) -> None:
    events = _by_code()[code]
    assert [e["class"] for e in events] == [klass]
    assert events[0]["bus_id"].endswith(":00.0")


def test_xid_154_takes_the_recovery_action_its_line_names() -> None:
    assert {e["bus_id"]: e["class"] for e in _by_code()[154]} == {"0000:3a:00.0": "reset_gpu",
                                                                 "0000:88:00.0": "reboot"}
    assert xid.classify(154, "GPU recovery action changed from 0x0 (None) to 0x0 (None)") == "informational"
    assert xid.classify(154, "GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)") == "reset_gpu"
    assert xid.classify(154, "garbled") == "unknown"


def test_repeated_lines_are_counted_once_per_code_with_the_processes() -> None:
    (x13,) = _by_code()[13]
    assert x13["count"] == 2 and x13["pids"] == [40211] and x13["names"] == ["python3"]
    assert "Out Of Range Address" in x13["line"] and "Graphics Exception: ESR" in x13["last_line"]
    assert _by_code()[63][0]["pids"] == []  # pid='<unknown>'


def test_sxid_first_lines_only_with_the_driver_severity() -> None:
    sxids = [e for e in _events() if e["kind"] == "sxid"]
    assert [(e["device"], e["bus_id"], e["sxid"], e["fatal"], e["class"], e["count"]) for e in sxids] == [
        ("nvidia-nvswitch3", "0000:08:00.0", 22013, False, "informational", 1),
        ("nvidia-nvswitch1", "0000:06:00.0", 20034, True, "reset_fabric", 2),
    ]


def test_doctor_names_the_gpu_and_the_action_per_class() -> None:
    gpus = [{"index": i, "lost": False, "pci_bus_id_sysfs": bus, "uuid": f"GPU-{i}"}
            for i, bus in enumerate(["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:3b:00.0", "0000:5d:00.0",
                                     "0000:89:00.0"])]
    facts = {"nvml": {"available": True, "count": len(gpus), "gpus": gpus},
             "platform": {"kernel_log": klog.kernel_log(str(LOG), commands=False)}}
    found = {(d["id"], d["subject"]): d for d in rules.diagnose(facts)}
    assert sorted(found) == [
        ("sxid_informational", "0000:08:00.0"),
        ("sxid_reset_fabric", "0000:06:00.0"),
        ("xid_application", "0000:18:00.0"),
        ("xid_application", "0000:2a:00.0"),
        ("xid_contact_support", "0000:89:00.0"),
        ("xid_informational", "0000:2a:00.0"),
        ("xid_reboot", "0000:88:00.0"),
        ("xid_reset_gpu", "0000:3a:00.0"),
        ("xid_reset_gpu", "0000:3b:00.0"),
        ("xid_reset_gpu", "0000:5d:00.0"),
        ("xid_unknown", "0000:89:00.0"),
    ]
    reset = found[("xid_reset_gpu", "0000:3a:00.0")]
    assert reset["severity"] == "fail" and "nvidia-smi -r -i 2" in reset["fix"]
    assert reset["evidence"].startswith("GPU 2 (0000:3a:00.0) uuid GPU-2: Xid 48 ROBUST_CHANNEL_GPU_ECC_DBE x1")
    assert "Xid 64 INFOROM_DRAM_RETIREMENT_FAILURE" in reset["evidence"] and "Xid 154" in reset["evidence"]
    assert "SRAM uncorrectable-error threshold" in reset["fix"]  # the catalogue's investigatory step for 48
    app = found[("xid_application", "0000:18:00.0")]
    assert app["severity"] == "info" and "pid 40211, python3" in app["evidence"]
    assert "compute-sanitizer" in app["fix"]
    lost = found[("xid_reboot", "0000:88:00.0")]
    assert "not listed by NVML" in lost["evidence"] and lost["fix"].startswith("drain the node and reboot it")
    assert found[("sxid_reset_fabric", "0000:06:00.0")]["severity"] == "fail"
    assert "SXid 20034 Fatal x2" in found[("sxid_reset_fabric", "0000:06:00.0")]["evidence"]
    assert found[("xid_unknown", "0000:89:00.0")]["severity"] == "warn"
    assert xid.SOURCE in found[("xid_unknown", "0000:89:00.0")]["fix"]


def test_kmsg_records_are_read_when_the_journal_shows_no_kernel_messages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("4,1021,7311220934,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                    "GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n")
    monkeypatch.setattr(klog, "_journal", lambda: (None, "journalctl -k: Hint: You are currently not seeing "
                                                         "messages from other users and the system."))
    report = klog.kernel_log(None, commands=True, kmsg_path=str(kmsg))
    assert report["available"] and report["source"] == str(kmsg) and report["error"] is None
    assert [(e["xid"], e["class"], e["bus_id"]) for e in report["events"]] == [(79, "reboot", "0000:3b:00.0")]


def test_no_access_is_reported_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(klog, "_journal", lambda: (None, "journalctl -k: No journal files were opened due to "
                                                         "insufficient permissions."))
    report = klog.kernel_log(None, commands=True, kmsg_path=str(tmp_path / "missing"))
    assert not report["available"] and report["events"] == []
    assert "insufficient permissions" in report["error"] and "missing" in report["error"]
    (found,) = rules.diagnose({"platform": {"kernel_log": report}})
    assert found["id"] == "kernel_log_unreadable" and found["severity"] == "info"
    assert rules.problems([found]) == []


def test_journal_hint_for_users_outside_adm_means_no_access(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    hint = (b"Hint: You are currently not seeing messages from other users and the system.\n"
            b"      Users in groups 'adm', 'systemd-journal' can see all messages.\n")
    monkeypatch.setattr(klog.subprocess, "run",
                        lambda argv, **_k: subprocess.CompletedProcess(argv, 0, b"", hint))
    text, error = klog._journal()
    assert text is None and "group adm or systemd-journal" in error


def test_catalogue_rows_are_consistent() -> None:
    for code, (name, immediate, investigate, klass) in xid.XIDS.items():
        assert name.isupper() and immediate and investigate in xid.INVESTIGATE, code
        assert klass is None or klass in xid.CLASSES, code
    assert set(xid.NEEDS_ADMIN) == {"reset_gpu", "reboot", "contact_support", "reset_fabric"}


def test_an_xid_line_naming_a_process_called_sxid_is_still_an_xid() -> None:
    events = klog.scan_kernel_log("NVRM: Xid (PCI:0000:01:00): 13, pid=123, name=SXid_bench, Graphics Exception")
    assert [(e["kind"], e["xid"], e["class"], e["pids"], e["names"]) for e in events] == [
        ("xid", 13, "application", [123], ["SXid_bench"])]


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:01:00): " + "9" * 5000 + ", pid=1",
    "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): " + "1" * 5000 + ", Fatal, Link 32",
    "NVRM: Xid (PCI:0000:01:00): \u0663, pid=1",  # ARABIC-INDIC DIGIT THREE: no code the driver prints
])
def test_a_code_of_no_driver_number_is_no_event(line: str) -> None:
    assert klog.scan_kernel_log(line) == []


def test_an_overlong_pid_is_not_recorded() -> None:
    events = klog.scan_kernel_log("NVRM: Xid (PCI:0000:01:00): 13, pid=" + "9" * 5000 + ", name=x")
    assert [(e["xid"], e["pids"], e["names"]) for e in events] == [(13, [], ["x"])]


def test_a_long_line_of_gpu_bus_ids_is_read_through() -> None:
    # "NVRM: ... GPU <bus>" repeated, no "fallen off the bus": one pattern .*?GPU <bus>.*fallen took minutes on 23 kB
    line = "NVRM: GPU 0000:01:00.0 " * 20000
    assert klog.scan_kernel_log(line) == []
    events = klog.scan_kernel_log(line + "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.")
    assert [(e["kind"], e["bus_id"]) for e in events] == [("fallen_off_bus", "0000:01:00.0")]
