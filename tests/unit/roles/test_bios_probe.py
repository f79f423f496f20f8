"""bios_probe: NVML, the platform and the last report read, the findings evaluated and the report written in one
call, on fake sysfs/procfs trees (tests/bios_check_fixtures.py) and the real 2x H200 NVML capture
(tests/data/real-h200/facts.json) in place of the NVML reading."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuprov.gpu.plugins.action.bios_probe import ActionModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.bios_report import report_text
from ansible_collections.gpuprov.gpu.plugins.modules import bios_findings, bios_probe

from tests.bios_check_fixtures import LOG_XID79, Gpu, build_tree, healthy_h200

ROOT = Path(__file__).resolve().parents[3]
FACTS = json.loads((ROOT / "tests" / "data" / "real-h200" / "facts.json").read_text())
H200 = {"expected_gpu_model": "H200", "expected_gpu_count": 2}
OTHER_ROLE = {"role": "verify", "id": "x", "severity": "warn", "subject": "s", "evidence": "e", "fix": "f"}


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The healthy 2x H200 tree under ``tmp_path``; NVML reads the real capture."""
    build_tree(tmp_path, healthy_h200())
    monkeypatch.setattr(bios_probe, "collect_nvml", lambda nv, sysfs_root, proc_root: json.loads(json.dumps(FACTS)))
    return tmp_path


def args(root: Path, **extra: Any) -> dict[str, Any]:
    """The module's arguments on the fake tree, owned by this process's user (any user can run the tests)."""
    return {
        "sysfs_root": str(root / "sys"),
        "proc_root": str(root / "proc"),
        "kernel_log_path": str(root / "kernel.log"),
        "report_path": str(root / "var" / "gpuprov" / "bios_check.json"),
        "owner": str(os.getuid()),
        "group": str(os.getgid()),
        "settings": H200,
        "existing_findings": [OTHER_ROLE, dict(OTHER_ROLE, role="bios_check", id="old")],
        **extra,
    }


def run(module: Any, params: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    with patch_module_args(params), pytest.raises(SystemExit) as exc:
        module.main()
    return int(exc.value.code or 0), json.loads(capsys.readouterr().out)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_report_written_once_then_unchanged(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = host / "var" / "gpuprov" / "bios_check.json"
    code, result = run(bios_probe, args(host), capsys)
    assert code == 0 and result["changed"] is True
    assert report.read_text() == report_text(result["report"])
    assert json.loads(report.read_text())["gpus"] == result["report_gpus"] and len(result["report_gpus"]) == 2
    assert (mode(report.parent), mode(report)) == (0o755, 0o644)
    assert result["failing"] == [] and result["fail_message"] == ""
    facts = result["ansible_facts"]
    assert facts["gpuprov_gpus"] == FACTS
    assert facts["bios_check_findings"] == result["findings"]
    # other roles' findings kept, the earlier bios_check entry replaced by this run's
    assert facts["gpuprov_findings"] == [OTHER_ROLE] + [dict(f, role="bios_check") for f in result["findings"]]
    inode = report.stat().st_ino
    code, again = run(bios_probe, args(host), capsys)
    assert code == 0 and again["changed"] is False
    assert report.stat().st_ino == inode  # not rewritten
    assert again["previous_gpus"] == result["report_gpus"]


def test_mode_rewritten_in_place(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = host / "var" / "gpuprov" / "bios_check.json"
    run(bios_probe, args(host), capsys)
    text, inode = report.read_text(), report.stat().st_ino
    report.chmod(0o600)
    report.parent.chmod(0o700)
    code, result = run(bios_probe, args(host), capsys)
    assert code == 0 and result["changed"] is True
    assert (mode(report.parent), mode(report)) == (0o755, 0o644)
    assert report.read_text() == text and report.stat().st_ino == inode  # same content: not written again


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root")
def test_owner_rewritten(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = host / "var" / "gpuprov" / "bios_check.json"
    run(bios_probe, args(host, owner="root", group="root"), capsys)
    os.chown(report, 4321, 4321)
    os.chown(report.parent, 4321, 0)
    code, result = run(bios_probe, args(host, owner="root", group="root"), capsys)
    assert code == 0 and result["changed"] is True
    assert [(p.stat().st_uid, p.stat().st_gid) for p in (report.parent, report)] == [(0, 0), (0, 0)]
    code, result = run(bios_probe, args(host, owner="root", group="root"), capsys)
    assert result["changed"] is False


def test_check_mode_writes_nothing_but_says_changed(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = host / "var" / "gpuprov" / "bios_check.json"
    code, result = run(bios_probe, args(host, _ansible_check_mode=True), capsys)
    assert code == 0 and result["changed"] is True and result["findings"]
    assert not report.parent.exists()
    run(bios_probe, args(host), capsys)
    code, result = run(bios_probe, args(host, _ansible_check_mode=True), capsys)
    assert result["changed"] is False
    report.write_text("{}\n")
    report.chmod(0o600)
    code, result = run(bios_probe, args(host, _ansible_check_mode=True), capsys)
    assert result["changed"] is True
    assert report.read_text() == "{}\n" and mode(report) == 0o600
    assert result["previous_gpus"] == []  # a report without gpus (or not JSON) gives none


def test_previous_report_names_the_lost_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # a third H200 on the PCI bus that NVML no longer lists; its UUID is only in the last report
    tree = healthy_h200()
    tree.gpus.append(Gpu("0000:00:08.0"))
    build_tree(tmp_path, tree)
    monkeypatch.setattr(bios_probe, "collect_nvml", lambda nv, sysfs_root, proc_root: FACTS)
    report = tmp_path / "var" / "gpuprov" / "bios_check.json"
    report.parent.mkdir(parents=True)
    lost = {"pci_bus_id_sysfs": "0000:00:08.0", "uuid": "GPU-00000000-0000-4000-8000-0000000000a2"}
    report.write_text(json.dumps({"gpus": [lost]}))
    code, result = run(bios_probe, args(tmp_path), capsys)
    assert code == 0  # findings do not fail the module; the role asserts on them
    assert result["previous_gpus"] == [lost]
    assert [(f["id"], f["subject"]) for f in result["failing"]] == [("gpu_lost", "0000:00:08.0")]
    assert lost["uuid"] in result["failing"][0]["evidence"]
    assert "gpu_lost 0000:00:08.0" in result["fail_message"]
    assert json.loads(report.read_text())["failed"] is True


def test_kernel_log_unavailable_replaces_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    build_tree(tmp_path, healthy_h200(kernel_log=LOG_XID79))
    monkeypatch.setattr(bios_probe, "collect_nvml", lambda nv, sysfs_root, proc_root: FACTS)
    code, result = run(bios_probe, args(tmp_path), capsys)
    assert code == 0 and result["report"]["platform"]["kernel_log"]["events"]  # the Xid 79 lines are read
    code, result = run(bios_probe, args(tmp_path, kernel_log_unavailable="no journal"), capsys)
    assert code == 0
    assert result["report"]["platform"]["kernel_log"] == {"source": None, "available": False, "events": [],
                                                          "reason": "no journal"}  # fmt: skip


def test_same_result_as_bios_findings(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, probe = run(bios_probe, args(host, _ansible_check_mode=True), capsys)
    params = args(host)
    code, findings = run(
        bios_findings,
        {"platform": probe["report"]["platform"], "gpus": FACTS, "settings": H200,
         "existing_findings": params["existing_findings"]},
        capsys,
    )  # fmt: skip
    assert code == 0
    for key in ("findings", "failing", "fail_message", "report", "report_gpus"):
        assert findings[key] == probe[key], key
    assert findings["ansible_facts"] == {k: v for k, v in probe["ansible_facts"].items() if k != "gpuprov_gpus"}


def test_the_action_plugin_passes_every_documented_option() -> None:
    options = set(yaml.safe_load(bios_probe.DOCUMENTATION)["options"])
    assert set(ActionModule._VALID_ARGS) == options - {"pynvml_dir"}  # pynvml_dir is the plugin's own
