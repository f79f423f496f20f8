"""On a lab container: dcgm-exporter built for another DCGM than the host engine, and the matching pair.

The container gets the DCGM stand-ins of gpuprov/lab/standin/dcgm.py as a signed apt repository on its loopback
(datacenter-gpu-manager 3.3.5 and 3.3.9, whose nv-hostengine/dcgmi report their version; exporter builds
3.3.5-3.4.1 and 3.3.9-3.6.1, which exit with "API version mismatch" against another engine). The tests run
playbooks/monitoring.yml through gpuprov.runner in order, on one container:

0. in check mode, before the repository is configured (a fresh host, where the nvidia_driver role configures it
   in the same run), the DCGM install is reported, not failed;
1. an exporter configured for another DCGM is refused before anything is installed, naming both versions
   and the fix;
2. the matching pair converges and the endpoint serves DCGM series;
3. DCGM upgraded while the exporter stays old (the reverse direction) is refused; the running pair is kept;
4. a binary whose build differs from the configured version (a re-published artifact) is refused before it
   is started, naming the binary's DCGM and the running engine's;
5. DCGM and exporter upgraded together converge, the engine runs the new DCGM, and a second run changes
   nothing.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuprov.lab.standin.dcgm import build
from gpuprov.runner import RunResult
from tests.integration.kernel_lab import exec_ok, run, task_results, wait_booted

pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = "/opt/gpuprov-standin-dcgm"
PORT = 8474
URL = f"http://127.0.0.1:{PORT}/"


@pytest.fixture(scope="module")
def box(lab_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A debian12 lab container serving the stand-in repository; yields container, manifest and state dir."""
    import docker

    work = tmp_path_factory.mktemp("monitoring-dcgm-versions")
    manifest = build(work / "standin")
    client = docker.from_env()
    container = client.containers.run(
        lab_images["debian12"], command="/lib/systemd/systemd", name=f"gpuprov-monitoring-dcgm-{uuid.uuid4().hex[:8]}",
        detach=True, cap_add=["SYS_ADMIN", "NET_ADMIN"], security_opt=["seccomp=unconfined"],
        tmpfs={"/run": "", "/run/lock": ""}, volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "ro"}},
    )
    try:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(str(work / "standin" / "repo"), arcname=Path(REPO).name)
        container.put_archive(str(Path(REPO).parent), buffer.getvalue())
        wait_booted(container)  # systemd-tmpfiles cleans /tmp during boot, which breaks apt's signature check
        exec_ok(container, (
            f"cd {REPO} && (setsid nohup python3 -m http.server --bind 127.0.0.1 {PORT} >/dev/null 2>&1 &); "
            f"for i in $(seq 50); do python3 -c \"import urllib.request as u; u.urlopen('{URL}Release')\" "
            "2>/dev/null && break; sleep 0.2; done; "
            f"echo 'deb [signed-by={REPO}/key.gpg] {URL} ./' > /etc/apt/sources.list.d/gpuprov-standin-dcgm.list; "
            "apt-get update -qq"
        ))
        yield {"container": container, "manifest": manifest, "state": work / "state"}
    finally:
        container.remove(force=True)


def apply(box: dict[str, Any], dcgm: str, exporter: str, binary: str | None = None) -> RunResult:
    """Run playbooks/monitoring.yml with DCGM ``dcgm`` and exporter version ``exporter``, downloading the
    stand-in build ``binary`` (default: the build of that version)."""
    artifact = box["manifest"]["exporters"][binary or exporter]
    extravars = {
        "monitoring_dcgm_version": dcgm,
        "monitoring_dcgm_exporter_version": exporter,
        "monitoring_dcgm_exporter_url": URL + artifact["path"],
        "monitoring_dcgm_exporter_sha256": artifact["sha256"],
        "monitoring_node_exporter": "false",
        "monitoring_wait_timeout": "30",
    }
    return run(box["container"], "monitoring.yml", box["state"], extravars)


def failure_text(result: RunResult, name: str) -> str:
    return " ".join(f["msg"] for f in result.hosts[name].failures)


def installed_dcgm(box: dict[str, Any]) -> str:
    rc, out = box["container"].exec_run(["dpkg-query", "-W", "-f=${Status} ${Version}", "datacenter-gpu-manager"])
    text = out.decode()
    # "hold ok installed 1:3.3.5" once the role holds it
    return text.split()[-1] if rc == 0 and " ok installed " in text else ""


FETCH = """
import sys, time, urllib.request
for _ in range(30):
    try:
        sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=5).read().decode())
        break
    except OSError:
        time.sleep(1)
"""


def metrics(box: dict[str, Any]) -> str:
    """The exporter's /metrics page, retried while it (re)starts (the lab image has no curl)."""
    rc, out = box["container"].exec_run(["python3", "-c", FETCH])
    assert rc == 0, out.decode(errors="replace")
    return str(out.decode(errors="replace"))


def test_check_mode_before_the_repository_is_configured_reports_the_install(box: dict[str, Any]) -> None:
    """On a fresh host the CUDA repository (DCGM's source) is configured by the nvidia_driver role earlier in the
    same run; in check mode it is not there yet, so the role reports the DCGM install instead of failing."""
    name = box["container"].name
    listed = "/etc/apt/sources.list.d/gpuprov-standin-dcgm.list"
    exec_ok(box["container"], f"mv {listed} /root/dcgm.list && apt-get update -qq")
    try:
        result = run(box["container"], "monitoring.yml", box["state"], {
            "monitoring_dcgm_version": "3.3.5", "monitoring_node_exporter": "false",
            "monitoring_dcgm_exporter_url": URL + box["manifest"]["exporters"]["3.3.5-3.4.1"]["path"],
            "monitoring_dcgm_exporter_sha256": box["manifest"]["exporters"]["3.3.5-3.4.1"]["sha256"]}, check=True)
    finally:
        exec_ok(box["container"], f"mv /root/dcgm.list {listed} && apt-get update -qq")
    assert result.failed_hosts == [], failure_text(result, name)
    assert result.hosts[name].changed > 0
    planned = task_results(result, "dcgm | Report the DCGM check mode would install from a repository not "
                                   "configured yet")
    assert planned and "Would install datacenter-gpu-manager=1:3.3.5" in planned[0]["msg"], planned
    assert installed_dcgm(box) == ""


def test_exporter_configured_for_another_dcgm_is_refused(box: dict[str, Any]) -> None:
    name = box["container"].name
    result = apply(box, dcgm="3.3.9", exporter="3.3.5-3.4.1")
    assert result.failed_hosts == [name]
    text = failure_text(result, name)
    assert "dcgm-exporter 3.3.5-3.4.1 is built for DCGM 3.3.5" in text
    assert "DCGM 3.3.9 is configured" in text
    assert "API version mismatch" in text
    assert "Fix:" in text and "3.3.9-3.6.1" in text
    assert installed_dcgm(box) == ""  # refused before anything was installed
    assert result.hosts[name].changed == 0


def test_matching_pair_serves_metrics(box: dict[str, Any]) -> None:
    name = box["container"].name
    result = apply(box, dcgm="3.3.5", exporter="3.3.5-3.4.1")
    assert result.failed_hosts == [], failure_text(result, name)
    assert installed_dcgm(box) == "1:3.3.5"
    status = exec_ok(box["container"], "dpkg-query -W -f='${Status}' datacenter-gpu-manager")
    assert status.startswith("hold ")
    assert "DCGM_FI_DEV_GPU_TEMP{" in metrics(box)
    assert exec_ok(box["container"], "systemctl is-active nvidia-dcgm dcgm-exporter").split() == ["active"] * 2


def test_dcgm_upgrade_with_old_exporter_is_refused(box: dict[str, Any]) -> None:
    name = box["container"].name
    result = apply(box, dcgm="3.3.9", exporter="3.3.5-3.4.1")
    assert result.failed_hosts == [name]
    text = failure_text(result, name)
    assert "3.3.5-3.4.1" in text and "3.3.9" in text and "Fix:" in text
    # the working pair was left alone
    assert installed_dcgm(box) == "1:3.3.5"
    assert "DCGM_FI_DEV_GPU_TEMP{" in metrics(box)


def test_binary_built_for_another_dcgm_is_not_started(box: dict[str, Any]) -> None:
    name = box["container"].name
    # configured 3.3.9-3.6.1, but the artifact at the URL is the 3.3.5 build (re-published under a new name)
    result = apply(box, dcgm="3.3.9", exporter="3.3.9-3.6.1", binary="3.3.5-3.4.1")
    assert result.failed_hosts == [name]
    text = failure_text(result, name)
    assert "reports dcgm-exporter 3.3.5-3.4.1, built for DCGM 3.3.5" in text
    assert "the host engine runs DCGM 3.3.9" in text
    assert "was not started" in text
    unit = exec_ok(box["container"], "cat /etc/systemd/system/dcgm-exporter.service")
    assert "/3.3.9-3.6.1/" not in unit


def test_upgrade_together_converges_and_is_idempotent(box: dict[str, Any]) -> None:
    name = box["container"].name
    result = apply(box, dcgm="3.3.9", exporter="3.3.9-3.6.1")
    assert result.failed_hosts == [], failure_text(result, name)
    assert installed_dcgm(box) == "1:3.3.9"
    engine = exec_ok(box["container"], "dcgmi -v").split("Hostengine build info:")[1]
    assert "Version : 3.3.9" in engine
    binary = "/opt/gpuprov/dcgm-exporter/3.3.9-3.6.1/dcgm-exporter"
    assert binary in exec_ok(box["container"], "cat /etc/systemd/system/dcgm-exporter.service")
    # the running exporter is the new build, read from its process (`systemctl show -p ExecStart` has read empty
    # right after the restart); the bracket keeps the pattern from matching the shell that runs pgrep
    assert binary in exec_ok(box["container"], f"pgrep -a -f '[{binary[0]}]{binary[1:]}'")
    assert "DCGM_FI_DEV_GPU_TEMP{" in metrics(box)
    again = apply(box, dcgm="3.3.9", exporter="3.3.9-3.6.1")
    assert again.failed_hosts == []
    assert again.hosts[name].changed == 0
