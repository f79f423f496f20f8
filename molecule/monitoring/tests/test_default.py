"""Real state after the monitoring role on the stand-in DCGM 3.3.5 + dcgm-exporter 3.3.5-3.4.1 (prepare.yml):
packages pinned and held, the three services active and enabled, the exporter's endpoint serving DCGM series
from the role's collectors file, node_exporter serving, and the Prometheus files present and valid (checked
with the controller's promtool: Debian's ``prometheus`` package)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

PROM_DIR = "/etc/prometheus/gpuprov"
DCGM = "3.3.5"
EXPORTER = "3.3.5-3.4.1"
# The lab image has no curl; its python3 fetches the page.
FETCH = "python3 -c 'import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1]).read().decode())' %s"


def test_dcgm_package_pinned_and_held(host):
    pkg = host.package("datacenter-gpu-manager")
    assert pkg.is_installed
    assert pkg.version == f"1:{DCGM}"
    assert "hold" in host.check_output("dpkg-query -W -f='${Status}' datacenter-gpu-manager")


@pytest.mark.parametrize("service", ["nvidia-dcgm", "dcgm-exporter", "prometheus-node-exporter"])
def test_services_active_and_enabled(host, service):
    svc = host.service(service)
    assert svc.is_running, service
    assert svc.is_enabled, service


def test_host_engine_reports_the_installed_dcgm(host):
    out = host.check_output("dcgmi -v")
    engine = out.split("Hostengine build info:")[1]
    assert f"Version : {DCGM}" in engine


def test_exporter_binary_matches_dcgm(host):
    binary = f"/opt/gpuprov/dcgm-exporter/{EXPORTER}/dcgm-exporter"
    assert host.file(binary).mode == 0o755
    assert host.check_output("%s --version", binary) == f"DCGM Exporter version {EXPORTER}"
    unit = host.file("/etc/systemd/system/dcgm-exporter.service").content_string
    assert f"ExecStart={binary} -f /etc/dcgm-exporter/gpuprov-counters.csv" in unit


def test_exporter_serves_every_collector_field(host):
    csv = host.file("/etc/dcgm-exporter/gpuprov-counters.csv").content_string
    fields = [line.split(",")[0].strip() for line in csv.splitlines() if line.strip() and not line.startswith("#")]
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in fields  # DCGM >= 3.3 name
    metrics = host.check_output(FETCH, "http://127.0.0.1:9400/metrics")
    served = {line.split("{")[0] for line in metrics.splitlines() if line.startswith("DCGM_FI_")}
    assert served == set(fields)


def test_node_exporter_serves(host):
    metrics = host.check_output(FETCH, "http://127.0.0.1:9100/metrics")
    assert "node_boot_time_seconds" in metrics


def test_file_sd_targets(host):
    name = host.backend.get_hostname()
    for job, port in (("dcgm", 9400), ("node", 9100)):
        data = json.loads(host.file(f"{PROM_DIR}/file_sd/gpuprov-{job}.json").content_string)
        assert data == [{"targets": [f"{name}:{port}"], "labels": {"gpuprov_host": name}}]


def test_rules_and_scrape_config_valid(host, tmp_path: Path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: install Debian's prometheus package"
    rules = tmp_path / "rules" / "gpuprov-gpu.rules.yml"
    rules.parent.mkdir()
    rules.write_text(host.file(f"{PROM_DIR}/rules/gpuprov-gpu.rules.yml").content_string, encoding="utf-8")
    shipped = Path(__file__).resolve().parents[3] / "roles/monitoring/files/prometheus/gpuprov-gpu.rules.yml"
    assert rules.read_text(encoding="utf-8") == shipped.read_text(encoding="utf-8")
    subprocess.run([promtool, "check", "rules", str(rules)], check=True, capture_output=True)

    scrape = yaml.safe_load(host.file(f"{PROM_DIR}/gpuprov-scrape.yml").content_string)
    assert [job["job_name"] for job in scrape["scrape_configs"]] == ["gpuprov-dcgm", "gpuprov-node"]
    for job in scrape["scrape_configs"]:
        sd = job["file_sd_configs"][0]["files"][0]
        assert host.file(sd).is_file
        local = tmp_path / Path(sd).name
        local.write_text(host.file(sd).content_string, encoding="utf-8")
        job["file_sd_configs"][0]["files"] = [str(local)]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"rule_files": [str(rules)], **scrape}), encoding="utf-8")
    proc = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
