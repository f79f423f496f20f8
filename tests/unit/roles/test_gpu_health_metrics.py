"""The monitoring role's GPU health collector (plugins/module_utils/gpu_health_metrics.py): its metrics from the
recorded kernel log, valid for Prometheus (``promtool check metrics``), runnable from exactly the files the role
copies to a host, and the only gpuprov_* names the alert rules read; the DCGM Xid alert agrees with the catalogue."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuprov.gpu.plugins.module_utils import gpu_health_metrics as metrics
from ansible_collections.gpuprov.gpu.plugins.module_utils import xid
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_kernel_log import kernel_log

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "monitoring"
LOG = ROOT / "tests" / "data" / "kernel-log" / "gpu-health.log"
RULES = ROLE / "files" / "prometheus" / "gpuprov-gpu.rules.yml"


def _text() -> str:
    return metrics.render(kernel_log(str(LOG), commands=False), {"0000:3a:00.0": "GPU-2f6e"}, now=1764324000)


def test_counts_per_gpu_code_and_class() -> None:
    lines = _text().splitlines()
    assert 'gpuprov_gpu_xid_events_total{pci_bus_id="0000:3a:00.0",uuid="GPU-2f6e",xid="48",class="reset_gpu"} 1' in (
        lines)
    assert 'gpuprov_gpu_xid_events_total{pci_bus_id="0000:18:00.0",xid="13",class="application"} 2' in lines
    assert 'gpuprov_gpu_xid_events_total{pci_bus_id="0000:88:00.0",xid="154",class="reboot"} 1' in lines
    assert ('gpuprov_nvswitch_sxid_events_total{pci_bus_id="0000:06:00.0",device="nvidia-nvswitch1",sxid="20034",'
            'class="reset_fabric"} 2') in lines
    assert "gpuprov_gpu_kernel_log_readable 1" in lines
    assert "gpuprov_gpu_health_collected_timestamp_seconds 1764324000" in lines
    unreadable = metrics.render({"available": False, "events": []}, now=0)
    assert "gpuprov_gpu_kernel_log_readable 0" in unreadable.splitlines()


def test_promtool_accepts_the_exposition() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install Debian's prometheus package (apt-get install prometheus)")
    proc = subprocess.run([promtool, "check", "metrics"], input=_text(), capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_runs_from_the_files_the_role_copies(tmp_path: Path) -> None:
    files = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__monitoring_health_files"]
    dest = tmp_path / "ansible_collections" / "gpuprov" / "gpu" / "plugins" / "module_utils"
    dest.mkdir(parents=True)
    for name in files:
        shutil.copy(ROOT / "plugins" / "module_utils" / name, dest / name)
    out = tmp_path / "textfile" / "gpuprov-gpu-health.prom"
    out.parent.mkdir()
    # -S: no site-packages, so nothing but the copied files can be imported (as on a host)
    proc = subprocess.run([sys.executable, "-S", "-m", "ansible_collections.gpuprov.gpu.plugins.module_utils."
                           "gpu_health_metrics", "--output", str(out), "--kernel-log", str(LOG)],
                          env={"PYTHONPATH": str(tmp_path), "PATH": os.environ.get("PATH", "")},
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert 'xid="79",class="reboot"} 1' in out.read_text() and list(out.parent.iterdir()) == [out]


def test_rules_read_exactly_the_collected_metrics() -> None:
    used = set(re.findall(r"\bgpuprov_[a-z_]+", RULES.read_text(encoding="utf-8").split("groups:", 1)[1]))
    assert used == set(metrics.METRICS)


def test_dcgm_fatal_xid_alert_agrees_with_the_catalogue() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    (fatal,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GpuXidFatal"]
    codes = {int(c) for c in re.findall(r"DCGM_FI_DEV_XID_ERRORS == (\d+)", fatal["expr"])}
    assert codes and {c: xid.classify(c) for c in codes if xid.classify(c) not in xid.NEEDS_ADMIN} == {}
