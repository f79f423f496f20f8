"""Verify gpuprov-worker@cpu in the container: a running, enabled systemd service that runs the real worker as
its own user on the planned CPUs, with a 0600 environment file, a restart policy, and real outputs for
images submitted to its sqlite queue (including a restart after kill -9 of its main process)."""

from __future__ import annotations

import json
import time
from typing import Any

UNIT = "gpuprov-worker@cpu.service"
VENV = "/opt/gpuprov/venv"
QUEUE = "sqlite:///var/lib/gpuprov/queues/images.db"
OUT = "/var/lib/gpuprov/images"
USER = "gpuprov-worker"
GPUPROV = f"runuser -u {USER} -- env GPUPROV_IMAGES_QUEUE={QUEUE} {VENV}/bin/gpuprov images"


def _cpus(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.replace(" ", ",").split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _show(host: Any, *props: str) -> dict[str, str]:
    out = host.check_output(f"systemctl show {UNIT} " + " ".join(f"-p {p}" for p in props))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _status(host: Any) -> dict[str, int]:
    out = host.check_output(f"{GPUPROV} status --json")
    return json.loads(out)


def _wait_done(host: Any, want: int, timeout: float = 240) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        stats = _status(host)
        if stats["done"] + stats["failed"] >= want or time.monotonic() > deadline:
            return stats
        time.sleep(1)


def test_service_running_enabled_as_its_user(host: Any) -> None:
    svc = host.service(UNIT)
    assert svc.is_running and svc.is_enabled
    props = _show(host, "MainPID", "User", "Restart", "StartLimitBurst", "RestartPreventExitStatus")
    assert props["User"] == USER and props["Restart"] == "on-failure" and props["StartLimitBurst"] == "5"
    assert props["RestartPreventExitStatus"].startswith("2")
    pid = int(props["MainPID"])
    assert pid > 0
    assert host.check_output(f"ps -o user= -p {pid}").strip() == USER
    cmdline = host.file(f"/proc/{pid}/cmdline").content.split(b"\0")
    assert b"--follow" in cmdline and b"--gpus" in cmdline and cmdline[cmdline.index(b"--gpus") + 1] == b"cpu"
    assert not any(b"sqlite" in arg for arg in cmdline), "the queue URL must stay out of the process list"
    assert cmdline[cmdline.index(b"--procs-per-gpu") + 1] == b"2"
    # several processes per GPU; the CPU-mode instance still runs exactly one worker
    workers = host.check_output(f"pgrep -P {pid} -f gpuprov.images.worker || true").split()
    assert len(workers) == 1, workers
    # Triton's kernel cache: a folder the service user owns, named in the worker's environment
    environ = dict(v.split(b"=", 1) for v in host.file(f"/proc/{pid}/environ").content.split(b"\0") if b"=" in v)
    cache = environ[b"TRITON_CACHE_DIR"].decode()
    assert cache == "/var/cache/gpuprov-worker/triton", cache
    assert host.file("/var/cache/gpuprov-worker").user == USER
    # ... and what Triton compiles its launcher with: a C compiler and the headers of the venv's Python
    script = "import sysconfig; print(sysconfig.get_paths()['include'])"
    include = host.check_output(f'/opt/gpuprov/venv/bin/python -c "{script}"')
    assert host.file(f"{include}/Python.h").exists and host.exists("gcc")


def test_env_file_is_root_only_and_pins_cuda(host: Any) -> None:
    env = host.file("/etc/gpuprov/worker-cpu.env")
    assert env.exists and env.user == "root" and env.mode == 0o600
    lines = dict(line.split("=", 1) for line in env.content_string.splitlines() if "=" in line and line[0] != "#")
    assert lines["GPUPROV_IMAGES_QUEUE"].strip('"') == QUEUE
    assert lines["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert lines["CUDA_VISIBLE_DEVICES"] == ""  # CPU mode: no GPU may be opened
    assert lines["GPUPROV_WORKER_GPUS"] == "cpu"


def test_cpu_affinity_is_set_and_applied(host: Any) -> None:
    online = _cpus(host.file("/sys/devices/system/cpu/online").content_string.strip())
    shown = _show(host, "CPUAffinity", "MainPID")
    assert shown["CPUAffinity"], "CPUAffinity= is not set on the unit"
    assert _cpus(shown["CPUAffinity"]) == online
    status = host.file(f"/proc/{shown['MainPID']}/status").content_string
    allowed = next(line.split(":", 1)[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
    assert _cpus(allowed.strip()) == online
    dropin = host.file("/etc/systemd/system/gpuprov-worker@cpu.service.d/affinity.conf")
    assert "CPU mode" in dropin.content_string


def test_submitted_images_are_processed_by_the_service(host: Any) -> None:
    before = _status(host)
    make = (
        "import sys; from PIL import Image\n"
        "for i in range(6):\n"
        "    Image.new('RGB', (200 + 10 * i, 120), (40 * i, 90, 160)).save(f'/srv/in/{i}.jpg', quality=90)\n"
        "open('/srv/in/corrupt.jpg', 'wb').write(open('/srv/in/0.jpg', 'rb').read()[:80])\n"
    )
    host.check_output("install -d -o gpuprov-worker -g gpuprov-worker /srv/in")
    host.check_output(f'runuser -u {USER} -- {VENV}/bin/python -c "{make}"')
    out = host.check_output(f"{GPUPROV} submit /srv/in")
    assert out.startswith("7 new of 7")
    stats = _wait_done(host, before["done"] + before["failed"] + 7)
    assert (stats["done"] - before["done"], stats["failed"] - before["failed"]) == (6, 1), stats
    deadline = time.monotonic() + 30
    while True:  # the service rewrites the manifest once the queue is drained
        manifest = host.file(f"{OUT}/manifest.jsonl")
        rows = [json.loads(x) for x in manifest.content_string.splitlines()] if manifest.exists else []
        if len(rows) >= stats["done"] or time.monotonic() > deadline:
            break
        time.sleep(1)
    ours = [r for r in rows if r["path"].startswith("/srv/in/")]
    assert len(ours) == 6
    for row in ours:
        thumb = host.file(f"{OUT}/{row['thumb']}")
        assert thumb.exists and thumb.user == USER and row["sha256"] in thumb.path
        assert thumb.content[:2] == b"\xff\xd8"  # a JPEG
    fails = host.file(f"{OUT}/failures.jsonl").content_string
    assert "decode error" in fails
    assert host.service(UNIT).is_running  # --follow: still waiting for more


def test_killed_worker_is_restarted(host: Any) -> None:
    first = _show(host, "MainPID", "NRestarts")
    host.check_output(f"kill -9 {first['MainPID']}")
    deadline = time.monotonic() + 30
    while True:
        now = _show(host, "MainPID", "NRestarts", "ActiveState")
        if now["ActiveState"] == "active" and now["MainPID"] not in ("0", first["MainPID"]):
            break
        assert time.monotonic() < deadline, now
        time.sleep(0.5)
    assert int(now["NRestarts"]) == int(first["NRestarts"]) + 1


def test_venv_holds_the_worker_distribution_and_no_controller_library(host: Any) -> None:
    listed = json.loads(host.check_output(f"{VENV}/bin/python -m pip list --format json --disable-pip-version-check"))
    names = {p["name"].lower().replace("_", "-") for p in listed}
    assert "gpuprov-worker" in names, sorted(names)
    controller = {"gpuprov", "ansible-core", "ansible-runner", "pydantic", "rich", "docker"}
    assert not names & controller, sorted(names & controller)
    # the gpuprov command of the worker distribution has its images group and none of the controller's commands
    listing = host.check_output(f"{VENV}/bin/gpuprov --help").split("Commands:")[1]
    assert [line.split()[0] for line in listing.splitlines() if line.strip()] == ["images"], listing
    assert host.run(f"{VENV}/bin/python -c 'import gpuprov.fleet'").rc != 0
