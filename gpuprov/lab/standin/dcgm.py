"""Stand-ins for NVIDIA DCGM and dcgm-exporter, for the monitoring role's tests (an exporter built for another
DCGM than the host engine's; docs/field-failures.md, 'dcgm-exporter built for another DCGM').

* ``datacenter-gpu-manager`` packages (:func:`dcgm_package`, two versions in :data:`DCGM_VERSIONS`) whose
  ``/usr/bin/nv-hostengine`` is a tiny Python host engine: ``--version`` prints ``Version : <v>`` as the
  real one does, ``-n`` serves its version on TCP ``127.0.0.1:5555`` (``--port``), and the package ships
  ``nvidia-dcgm.service`` as NVIDIA names it. ``/usr/bin/dcgmi -v`` prints its own version and, when the
  host engine answers, a ``Hostengine build info:`` block with the engine's version (the real layout).
* A ``dcgm-exporter`` "binary" (:func:`exporter_script`, a Python script) built for one DCGM version; its
  version string is ``<dcgm version>-<exporter version>`` (``--version`` prints
  ``DCGM Exporter version 3.3.5-3.4.1`` as urfave/cli does). On start it asks the host engine for its
  version and exits 1 with ``API version mismatch`` when it differs from the DCGM it was built for (the
  real crash loop of NVIDIA/dcgm-exporter issue 37); otherwise it serves ``/metrics`` with one
  ``DCGM_FI_*`` series per collectors-file field and GPU: the GPUs and readings ``nvidia-smi`` reports (in the
  lab, the real nvidia-smi over the mock NVML, so a profile's eight A100s are eight series), or, without
  nvidia-smi, an idle H200 pair (33 C, 73 W, Gen5 x16, 143771 MiB framebuffer; test values, not measurements).

``python -m gpuprov.lab.standin.dcgm OUT`` builds everything under OUT: a signed repository in ``OUT/repo``
(with the exporters under ``OUT/repo/exporters/``), the same packed as ``OUT/repo.tar`` (contents at its
root), and ``OUT/manifest.json``
(``{"dcgm_versions": [...], "exporters": {"<version>": {"path": "exporters/dcgm-exporter-<version>",
"sha256": "<hex>"}}}``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import tarfile
from pathlib import Path
from typing import Any

from gpuprov.exceptions import GpuprovError
from gpuprov.lab.standin.deb import FileSpec, PackageSpec
from gpuprov.lab.standin.repo import build_repository

log = logging.getLogger(__name__)

#: DCGM releases the stand-in repository offers (package version ``1:<v>``, as NVIDIA's CUDA repository
#: numbers datacenter-gpu-manager 3.x).
DCGM_VERSIONS = ("3.3.5", "3.3.9")

#: dcgm-exporter builds the stand-in offers: ``<dcgm>-<exporter>`` tags NVIDIA published for those DCGMs.
EXPORTER_VERSIONS = ("3.3.5-3.4.1", "3.3.9-3.6.1")

#: TCP port of the host engine (nv-hostengine's default).
HOSTENGINE_PORT = 5555

HOSTENGINE = r'''#!/usr/bin/python3
"""gpuprov stand-in nv-hostengine {version}: prints its version, serves it on TCP (not a real DCGM)."""
import argparse
import socketserver
import sys

VERSION = "{version}"


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        self.rfile.readline()
        self.wfile.write(("DCGM " + VERSION + "\n").encode())


def main():
    parser = argparse.ArgumentParser(prog="nv-hostengine")
    parser.add_argument("--version", action="store_true")
    parser.add_argument("-n", "--no-daemon", action="store_true")
    parser.add_argument("-p", "--port", type=int, default={port})
    parser.add_argument("-b", "--bind-interface", default="127.0.0.1")
    parser.add_argument("--service-account", default="")
    args = parser.parse_args()
    if args.version:
        print("Version : " + VERSION)
        print("Build ID : 0")
        print("Build Type : Release (gpuprov stand-in)")
        return 0
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer((args.bind_interface, args.port), Handler) as server:
        print("Started host engine version " + VERSION + " using port number: " + str(args.port), flush=True)
        server.serve_forever()
    return 0


sys.exit(main())
'''

DCGMI = r'''#!/usr/bin/python3
"""gpuprov stand-in dcgmi {version}: `dcgmi -v [--host H:P]` only."""
import socket
import sys

VERSION = "{version}"


def engine_version(host):
    name, _, port = host.partition(":")
    with socket.create_connection((name, int(port or {port})), timeout=3) as conn:
        conn.sendall(b"VERSION\n")
        reply = conn.makefile().readline().split()
    return reply[1] if len(reply) == 2 and reply[0] == "DCGM" else None


def main(argv):
    if "-v" not in argv and "--version" not in argv:
        print("gpuprov stand-in dcgmi supports only -v", file=sys.stderr)
        return 2
    host = argv[argv.index("--host") + 1] if "--host" in argv else "localhost:{port}"
    print("Version : " + VERSION)
    print("Build ID : 0")
    print("Build Type : Release (gpuprov stand-in)")
    try:
        engine = engine_version(host)
    except OSError as exc:
        print("Error: unable to establish a connection to the specified host: " + host + " (" + str(exc) + ")",
              file=sys.stderr)
        return 0
    print("")
    print("Hostengine build info:")
    print("Version : " + str(engine))
    print("Build ID : 0")
    return 0


sys.exit(main(sys.argv[1:]))
'''

UNIT = """\
[Unit]
Description=NVIDIA DCGM service (gpuprov stand-in {version})

[Service]
User=root
PrivateTmp=false
ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm
Restart=on-abort

[Install]
WantedBy=multi-user.target
"""

EXPORTER = r'''#!/usr/bin/python3
"""gpuprov stand-in dcgm-exporter {version} (built for DCGM {dcgm}); not NVIDIA's exporter."""
import argparse
import http.server
import socket
import subprocess
import sys

VERSION = "{version}"
BUILT_FOR_DCGM = "{dcgm}"
GPUS = 2
# Idle H200 readings (test values): field -> value
VALUES = {{
    "DCGM_FI_DEV_GPU_TEMP": 33, "DCGM_FI_DEV_MEMORY_TEMP": 30, "DCGM_FI_DEV_POWER_USAGE": 73.5,
    "DCGM_FI_DEV_SM_CLOCK": 345, "DCGM_FI_DEV_MEM_CLOCK": 2619, "DCGM_FI_DEV_GPU_UTIL": 0,
    "DCGM_FI_DEV_FB_USED": 0, "DCGM_FI_DEV_FB_FREE": 143771, "DCGM_FI_DEV_PCIE_LINK_GEN": 5,
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 5, "DCGM_FI_DEV_PCIE_LINK_WIDTH": 16, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": 16,
    "DCGM_FI_DEV_PERSISTENCE_MODE": 1, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 1,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 1,
}}


# What nvidia-smi reports of each GPU (the lab's real nvidia-smi over the mock NVML) -> the DCGM field it stands for
QUERY = (("temperature.gpu", "DCGM_FI_DEV_GPU_TEMP"), ("power.draw", "DCGM_FI_DEV_POWER_USAGE"),
         ("utilization.gpu", "DCGM_FI_DEV_GPU_UTIL"), ("memory.used", "DCGM_FI_DEV_FB_USED"),
         ("memory.free", "DCGM_FI_DEV_FB_FREE"), ("pcie.link.gen.current", "DCGM_FI_DEV_PCIE_LINK_GEN"),
         ("pcie.link.gen.max", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN"),
         ("pcie.link.width.current", "DCGM_FI_DEV_PCIE_LINK_WIDTH"),
         ("pcie.link.width.max", "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"))


def gpus():
    """[(index, uuid, name, {{field: value}})] of the host's GPUs as nvidia-smi reports them; without nvidia-smi
    (a host with no simulated GPUs), an idle H200 pair."""
    argv = ["nvidia-smi", "--query-gpu=index,uuid,name," + ",".join(q for q, _ in QUERY),
            "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return [(i, "GPU-standin-%d" % i, "NVIDIA H200", dict(VALUES)) for i in range(GPUS)]
    found = []
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3 + len(QUERY):
            continue
        values = dict(VALUES)
        for (_, field), cell in zip(QUERY, cells[3:]):
            try:
                values[field] = float(cell) if "." in cell else int(cell)
            except ValueError:
                pass  # [N/A]
        found.append((int(cells[0]), cells[1], cells[2], values))
    return found


def engine_version(remote):
    name, _, port = remote.rpartition(":")
    with socket.create_connection((name or "localhost", int(port)), timeout=3) as conn:
        conn.sendall(b"VERSION\n")
        reply = conn.makefile().readline().split()
    return reply[1] if len(reply) == 2 else "unknown"


def fields(path):
    out = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if line and not line.startswith("#"):
                parts = [p.strip() for p in line.split(",", 2)]
                if len(parts) == 3 and parts[1] in ("gauge", "counter"):
                    out.append(parts)
    return out


def main():
    parser = argparse.ArgumentParser(prog="dcgm-exporter")
    parser.add_argument("--version", "-v", action="store_true")
    parser.add_argument("-f", "--collectors", default="/etc/dcgm-exporter/default-counters.csv")
    parser.add_argument("-a", "--address", default=":9400")
    parser.add_argument("-r", "--remote-hostengine-info", default="localhost:{port}")
    parser.add_argument("-c", "--collect-interval", default="30000")
    args = parser.parse_args()
    if args.version:
        print("DCGM Exporter version " + VERSION)
        return 0
    try:
        engine = engine_version(args.remote_hostengine_info)
    except OSError as exc:
        print("level=fatal msg=\"Error connecting to nv-hostengine: " + str(exc) + "\"", file=sys.stderr)
        return 1
    if engine != BUILT_FOR_DCGM:
        print("level=fatal msg=\"API version mismatch: dcgm-exporter " + VERSION + " was built for DCGM "
              + BUILT_FOR_DCGM + ", the host engine is DCGM " + engine + "\"", file=sys.stderr)
        return 1
    counters = fields(args.collectors)
    devices = gpus()
    host = socket.gethostname()
    lines = []
    for name, kind, help_text in counters:
        lines += ["# HELP " + name + " " + help_text, "# TYPE " + name + " " + kind]
        for index, uuid, model, values in devices:
            labels = ('gpu="%d",UUID="%s",device="nvidia%d",modelName="%s",Hostname="%s"'
                      % (index, uuid, index, model, host))
            lines.append(name + "{{" + labels + "}} " + str(values.get(name, 0)))
    body = ("\n".join(lines) + "\n").encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    bind, _, port = args.address.rpartition(":")
    server = http.server.ThreadingHTTPServer((bind or "0.0.0.0", int(port)), Handler)
    print("Starting webserver on " + args.address + " (DCGM " + engine + ")", flush=True)
    server.serve_forever()
    return 0


sys.exit(main())
'''


def dcgm_package(version: str) -> PackageSpec:
    """``datacenter-gpu-manager`` ``1:<version>`` with the stand-in nv-hostengine, dcgmi and nvidia-dcgm.service."""
    fmt = {"version": version, "port": HOSTENGINE_PORT}
    return PackageSpec(
        name="datacenter-gpu-manager",
        version=f"1:{version}",
        depends=("python3",),
        description=f"gpuprov stand-in NVIDIA DCGM {version}\nnv-hostengine and dcgmi that report their version.",
        files={
            "/usr/bin/nv-hostengine": FileSpec(HOSTENGINE.format(**fmt), mode=0o755),
            "/usr/bin/dcgmi": FileSpec(DCGMI.format(**fmt), mode=0o755),
            "/lib/systemd/system/nvidia-dcgm.service": FileSpec(UNIT.format(**fmt)),
        },
    )


def exporter_script(version: str) -> str:
    """The stand-in dcgm-exporter for ``version`` (``<dcgm>-<exporter>``, e.g. ``3.3.5-3.4.1``).

    Raises:
        ValueError: ``version`` has no ``-`` between the DCGM and exporter parts.
    """
    dcgm, sep, exporter = version.partition("-")
    if not sep or not exporter:
        raise ValueError(f"dcgm-exporter version {version!r} is not <dcgm>-<exporter>")
    return EXPORTER.format(version=version, dcgm=dcgm, port=HOSTENGINE_PORT)


def build(out: Path) -> dict[str, Any]:
    """Build the signed repository (``out/repo``) with both DCGM packages and the exporters, write and
    return the manifest (see the module docstring).

    Raises:
        EnvironmentMissing: dpkg-deb, dpkg-scanpackages or gpg is missing.
        ConfigError: a package could not be built.
    """
    repo = out / "repo"
    build_repository([dcgm_package(v) for v in DCGM_VERSIONS], repo)
    exporters: dict[str, dict[str, str]] = {}
    (repo / "exporters").mkdir(exist_ok=True)
    for version in EXPORTER_VERSIONS:
        rel = f"exporters/dcgm-exporter-{version}"
        data = exporter_script(version).encode()
        (repo / rel).write_bytes(data)
        exporters[version] = {"path": rel, "sha256": hashlib.sha256(data).hexdigest()}
    manifest: dict[str, Any] = {"dcgm_versions": list(DCGM_VERSIONS), "exporters": exporters}
    with tarfile.open(out / "repo.tar", "w") as tar:
        for child in sorted(repo.iterdir()):
            tar.add(str(child), arcname=child.name)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    log.info("DCGM stand-in repository %s", repo)
    return manifest


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuprov.lab.standin.dcgm OUT``: build the stand-ins under OUT; exit 0, or the error's code."""
    parser = argparse.ArgumentParser(prog="python -m gpuprov.lab.standin.dcgm", description=__doc__)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    try:
        build(args.out)
    except GpuprovError as exc:
        sys.stderr.write(f"gpuprov.lab.standin.dcgm: {exc}\n")
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
