#!/usr/bin/python3
"""Stand-in ``nvidia-ctk`` (shipped by the stand-in ``nvidia-container-toolkit-base`` as ``/usr/bin/nvidia-ctk``).

A standalone script (standard library only: it runs on lab hosts without gpuprov) that reads the host's GPUs
through ``libnvidia-ml.so.1`` with ctypes, so in the lab it answers from the mock NVML exactly as the real
``nvidia-ctk`` answers from NVIDIA's library:

* ``nvidia-ctk --version`` prints the toolkit version;
* ``nvidia-ctk cdi generate [--output=PATH] [--format=yaml|json]`` writes a CDI specification (kind
  ``nvidia.com/gpu``, cdiVersion 0.5.0) with one device per GPU by index (``0``) and by UUID, one per MIG
  device by ``<gpu index>:<MIG index>`` (the GPU's compute instances in (GPU instance id, compute instance id)
  order), and ``all``; each device's ``containerEdits.deviceNodes`` names ``/dev/nvidia<minor>`` (MIG devices
  also their ``/dev/nvidia-caps/nvidia-cap<N>`` nodes where ``/proc/driver/nvidia-caps/mig-minors`` lists
  them), the spec-wide edits the control nodes, ``NVIDIA_VISIBLE_DEVICES=void`` and a read-only mount of the
  loaded ``libnvidia-ml``. Without ``--output`` the spec goes to stdout;
* ``nvidia-ctk cdi list [--spec-dir=DIR ...]`` prints ``Found N CDI devices`` on stderr and one
  ``<kind>=<name>`` line per device on stdout, from every ``*.yaml``/``*.json`` spec in the spec directories
  (default ``/etc/cdi`` and ``/var/run/cdi``), as the real command does.

Anything else fails with exit 2. The NVIDIA Container Toolkit's CDI commands are described at
https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html. What the real tool adds
and this one leaves out: the driver's other libraries, binaries and firmware mounts, and the ldcache/symlink
hooks (the lab has no driver files beside the mock's ``libnvidia-ml.so.1``).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

#: Replaced by the toolkit's upstream version when the package is built (gpuprov.lab.standin.container).
VERSION = "@VERSION@"
KIND = "nvidia.com/gpu"
CDI_VERSION = "0.5.0"
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
#: NVML return codes this script tells apart (nvml.h).
NVML_SUCCESS = 0
MAX_GPU_INSTANCES = 15
MAX_COMPUTE_INSTANCES = 8


class NvmlError(Exception):
    """An NVML call failed; the message is nvmlErrorString's text."""


class Nvml:
    """The few NVML calls ``cdi generate`` needs, on ``libnvidia-ml.so.1``."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.lib.nvmlErrorString.restype = ctypes.c_char_p
        self.call("nvmlInit_v2")

    def call(self, name: str, *args: Any) -> None:
        ret = getattr(self.lib, name)(*args)
        if ret != NVML_SUCCESS:
            raise NvmlError(self.lib.nvmlErrorString(ret).decode())

    def text(self, name: str, *args: Any) -> str:
        buf = ctypes.create_string_buffer(96)
        self.call(name, *args, buf, ctypes.c_uint(len(buf)))
        return buf.value.decode()

    def uint(self, name: str, *args: Any) -> int:
        value = ctypes.c_uint(0)
        self.call(name, *args, ctypes.byref(value))
        return value.value

    def handle(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self.call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle

    def mig_devices(self, handle: ctypes.c_void_p) -> list[tuple[int, int]]:
        """(GPU instance id, compute instance id) of every compute instance; [] outside MIG mode."""
        current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
        try:
            self.call("nvmlDeviceGetMigMode", handle, ctypes.byref(current), ctypes.byref(pending))
        except NvmlError:
            return []
        if not current.value:
            return []
        found = []
        for gi_id in range(MAX_GPU_INSTANCES):
            gi = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetGpuInstanceById(handle, ctypes.c_uint(gi_id), ctypes.byref(gi)) != NVML_SUCCESS:
                continue
            for ci_id in range(MAX_COMPUTE_INSTANCES):
                ci = ctypes.c_void_p()
                if self.lib.nvmlGpuInstanceGetComputeInstanceById(gi, ctypes.c_uint(ci_id),
                                                                  ctypes.byref(ci)) == NVML_SUCCESS:
                    found.append((gi_id, ci_id))
        return found


def library_path() -> str:
    """Real path of the loaded ``libnvidia-ml.so.1`` (from /proc/self/maps), the spec's one mount."""
    with Path("/proc/self/maps").open(encoding="utf-8") as maps:
        for line in maps:
            if "libnvidia-ml.so" in line:
                return os.path.realpath(line.split()[-1])
    return "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def mig_minors(path: str = "/proc/driver/nvidia-caps/mig-minors") -> dict[str, int]:
    """``gpu0/gi1/access`` -> minor of ``/dev/nvidia-caps/nvidia-cap<minor>``; {} where the file is absent."""
    try:
        with Path(path).open(encoding="utf-8") as handle:
            return {key: int(minor) for key, minor in (line.split() for line in handle if line.strip())}
    except OSError:
        return {}


def generate() -> dict[str, Any]:
    """The CDI specification of the host's GPUs, as a dict."""
    nvml = Nvml()
    minors = mig_minors()
    devices: list[dict[str, Any]] = []
    every: list[str] = []
    for index in range(nvml.uint("nvmlDeviceGetCount_v2")):
        handle = nvml.handle(index)
        node = f"/dev/nvidia{nvml.uint('nvmlDeviceGetMinorNumber', handle)}"
        every.append(node)
        for name in (str(index), nvml.text("nvmlDeviceGetUUID", handle)):
            devices.append({"name": name, "containerEdits": {"deviceNodes": [{"path": node}]}})
        for mig_index, (gi_id, ci_id) in enumerate(nvml.mig_devices(handle)):
            keys = (f"gpu{index}/gi{gi_id}/access", f"gpu{index}/gi{gi_id}/ci{ci_id}/access")
            caps = [minors[key] for key in keys if key in minors]
            nodes = [node] + [f"/dev/nvidia-caps/nvidia-cap{cap}" for cap in caps]
            every.extend(nodes[1:])
            devices.append({"name": f"{index}:{mig_index}",
                            "containerEdits": {"deviceNodes": [{"path": path} for path in nodes]}})
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [{"path": path} for path in every]}})
    lib = library_path()
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": devices,
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": path} for path in CONTROL_NODES],
            "mounts": [{"hostPath": lib, "containerPath": lib, "options": ["ro", "nosuid", "nodev", "bind"]}],
        },
    }


def to_yaml(value: Any, indent: int = 0) -> list[str]:
    """Block-style YAML lines of a dict/list/str tree (strings JSON-quoted, which YAML reads as they are)."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                lines.append(f"{pad}{key}:")
                # a list stays at its key's indentation, as nvidia-ctk's YAML writer puts it
                lines.extend(to_yaml(item, indent if isinstance(item, list) else indent + 2))
            else:
                lines.append(f"{pad}{key}: {json.dumps(item)}")
    else:
        for item in value:
            nested = to_yaml(item, indent + 2) if isinstance(item, (dict, list)) else [pad + "  " + json.dumps(item)]
            lines.append(pad + "- " + nested[0].lstrip())
            lines.extend(nested[1:])
    return lines


def device_names(path: str) -> list[str]:
    """``kind=name`` of every device in one spec file (JSON, or YAML as :func:`to_yaml` and nvidia-ctk write)."""
    text = Path(path).read_text(encoding="utf-8")
    if path.endswith(".json"):
        spec = json.loads(text)
        return [f"{spec['kind']}={device['name']}" for device in spec.get("devices", [])]
    kind = re.search(r'^kind:\s*"?([^"\s]+)"?\s*$', text, re.M)
    devices = text.split("\ndevices:", 1)[-1].split("\ncontainerEdits:")[0]
    names = re.findall(r'^\s*- name:\s*"?([^"\n]+?)"?\s*$', devices, re.M)
    return [f"{kind.group(1) if kind else KIND}={name}" for name in names]


def option(args: list[str], name: str) -> list[str]:
    """Values of ``--name=V`` / ``--name V`` in ``args``."""
    values = []
    for position, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            values.append(arg.split("=", 1)[1])
        elif arg == "--" + name and position + 1 < len(args):
            values.append(args[position + 1])
    return values


def main(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-v"]):
        sys.stdout.write(f"NVIDIA Container Toolkit CLI version {VERSION}\n")
        return 0
    if argv[:2] == ["cdi", "generate"]:
        try:
            spec = generate()
        except (OSError, NvmlError) as exc:
            sys.stderr.write(f'level=error msg="failed to generate CDI spec: failed to initialize NVML: {exc}"\n')
            return 1
        fmt = (option(argv, "format") or ["json" if "".join(option(argv, "output")).endswith(".json") else "yaml"])[0]
        text = json.dumps(spec, indent=2) + "\n" if fmt == "json" else "---\n" + "\n".join(to_yaml(spec)) + "\n"
        output = option(argv, "output")
        if not output:
            sys.stdout.write(text)
            return 0
        target = Path(output[0])
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)
        tmp.replace(target)
        sys.stderr.write(f'level=info msg="Generated CDI spec with version {CDI_VERSION}"\n')
        return 0
    if argv[:2] == ["cdi", "list"]:
        names: list[str] = []
        for directory in option(argv, "spec-dir") or list(SPEC_DIRS):
            if Path(directory).is_dir():
                for entry in sorted(Path(directory).iterdir()):
                    if entry.suffix in (".yaml", ".json"):
                        names.extend(device_names(str(entry)))
        sys.stderr.write(f'level=info msg="Found {len(names)} CDI devices"\n')
        sys.stdout.write("".join(name + "\n" for name in names))
        return 0
    sys.stderr.write(f"nvidia-ctk stand-in: {' '.join(argv)} not implemented\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
