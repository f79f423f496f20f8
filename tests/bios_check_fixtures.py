"""Fake sysfs/procfs trees and kernel logs for bios_check (platform_info unit tests, lab cases, Molecule).

:func:`build_tree` writes ``<root>/sys``, ``<root>/proc`` and ``<root>/kernel.log`` the way the kernel lays
them out: ``sys/bus/pci/devices/<bdf>`` are symlinks into ``sys/devices/pci0000:00/<bridges>/<bdf>``, so
platform_info finds the bridges upstream of a GPU by walking the real path, as on a host.
"""

from __future__ import annotations

import io
import struct
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1024**3
MIB = 1024**2
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")

#: Kernel log lines of the faults (BAR1 not mapped: RmInitAdapter and invalid region; a lost GPU: Xid 79 with and
#: without the Xid).
LOG_RMINIT = [
    "kernel: NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x22:0x56:667)",
    "kernel: NVRM: GPU 0000:00:06.0: rm_init_adapter failed, device minor number 0",
]
LOG_INVALID_REGION = [
    "kernel: NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:",
    "kernel: NVRM: BAR1 is 0M @ 0x0 (PCI:0000:00:07.0)",
]
LOG_XID79 = [
    "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    "kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
]
LOG_FALLEN_NO_XID = [
    "kernel: NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus",
]


def acs_config(bits: list[str]) -> bytes:
    """A 4096-byte config space of a PCIe bridge with an ACS extended capability at 0x100."""
    config = bytearray(4096)
    struct.pack_into("<HH", config, 0, 0x10B5, 0x8747)  # PLX / Broadcom PEX
    struct.pack_into("<I", config, 0x100, 0x000D | (1 << 16))  # ACS, version 1, last capability
    ctl = sum(1 << ACS_BITS.index(b) for b in bits)
    struct.pack_into("<HH", config, 0x104, 0x7F, ctl)
    return bytes(config)


@dataclass
class Gpu:
    """One NVIDIA GPU function: bus id, BAR1 (start, size; size 0 = unassigned) and the bridges above it."""

    bus_id: str
    bar1_start: int = 0x38000000000
    bar1_size: int = 256 * GIB
    bridges: list[str] = field(default_factory=list)
    device: str = "0x2335"


@dataclass
class Tree:
    """What :func:`build_tree` writes."""

    gpus: list[Gpu] = field(default_factory=list)
    driver_loaded: bool = True
    efi: bool = False
    secure_boot: int | None = None
    hypervisor: bool = True
    cmdline: str = "BOOT_IMAGE=/vmlinuz root=UUID=0 ro"
    iommu_groups: int = 0
    iommu_type: str | None = None
    bridge_acs: dict[str, list[str]] = field(default_factory=dict)
    mem_kb: int = 263_000_000
    disks: dict[str, bool] = field(default_factory=lambda: {"nvme0n1": False})
    kernel_log: list[str] = field(default_factory=list)
    proc_gpus: list[str] = field(default_factory=list)
    #: /sys/module/nvidia/version when the driver is loaded: the mock profile's driver version on a sound host
    module_version: str = "580.159.04"
    #: process names under /proc/<pid>/comm (pids from 1000): the NVIDIA daemons running
    daemons: list[str] = field(default_factory=list)


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def resource_lines(gpu: Gpu) -> str:
    """A sysfs resource file: BAR0 16 MiB below 4 GiB, BAR1 as given (64-bit, so line 2 is empty), BAR3 32 MiB."""
    zero = "0x0000000000000000 0x0000000000000000 0x0000000000000000"
    bar1 = (
        zero
        if not gpu.bar1_size
        else (f"0x{gpu.bar1_start:016x} 0x{gpu.bar1_start + gpu.bar1_size - 1:016x} 0x000000000014220c")
    )
    lines = [
        "0x00000000f6000000 0x00000000f6ffffff 0x0000000000040200",
        bar1,
        zero,
        "0x00000000f8000000 0x00000000f9ffffff 0x000000000014220c",
        zero,
        zero,
        zero,
    ]
    return "\n".join(lines) + "\n"


def build_tree(root: Path, tree: Tree) -> Path:
    """Write the fake ``sys``, ``proc`` and ``kernel.log`` under ``root``; returns ``root``."""
    sys_root, proc = root / "sys", root / "proc"
    for gpu in tree.gpus:
        parent = sys_root / "devices" / "pci0000:00"
        for bridge in gpu.bridges:
            parent = parent / bridge
            _write(parent / "vendor", "0x10b5\n")
            _write(parent / "class", "0x060400\n")
            _write(parent / "config", acs_config(tree.bridge_acs.get(bridge, [])))
        dev = parent / gpu.bus_id
        _write(dev / "vendor", "0x10de\n")
        _write(dev / "device", gpu.device + "\n")
        _write(dev / "class", "0x030200\n")
        _write(dev / "resource", resource_lines(gpu))
        if tree.iommu_type:
            _write(dev / "iommu_group" / "type", tree.iommu_type + "\n")
        link = sys_root / "bus" / "pci" / "devices" / gpu.bus_id
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../../..") / dev.relative_to(sys_root))
    (sys_root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    if tree.driver_loaded:
        _write(sys_root / "module" / "nvidia" / "version", tree.module_version + "\n")
    for pid, name in enumerate(tree.daemons, start=1000):
        _write(proc / str(pid) / "comm", name[:15] + "\n")
    if tree.efi:
        (sys_root / "firmware" / "efi" / "efivars").mkdir(parents=True, exist_ok=True)
        if tree.secure_boot is not None:
            _write(
                sys_root / "firmware" / "efi" / "efivars" / SECURE_BOOT_VAR,
                b"\x06\x00\x00\x00" + bytes([tree.secure_boot]),
            )
    for group in range(tree.iommu_groups):
        (sys_root / "kernel" / "iommu_groups" / str(group) / "devices").mkdir(parents=True, exist_ok=True)
    for name, rotational in tree.disks.items():
        _write(sys_root / "block" / name / "queue" / "rotational", "1\n" if rotational else "0\n")
        _write(sys_root / "block" / name / "size", "3750748848\n")
        _write(sys_root / "block" / name / "removable", "0\n")
    _write(proc / "cmdline", tree.cmdline + "\n")
    _write(proc / "meminfo", f"MemTotal:       {tree.mem_kb} kB\nMemFree:        1000 kB\n")
    flags = "fpu vme de pse sse sse2" + (" hypervisor" if tree.hypervisor else "")
    _write(proc / "cpuinfo", f"processor\t: 0\nflags\t\t: {flags}\n")
    for bus in tree.proc_gpus:
        _write(proc / "driver" / "nvidia" / "gpus" / bus / "information", f"Bus Location: \t {bus}\n")
    _write(root / "kernel.log", "".join(f"Nov 30 17:13:37 host {line}\n" for line in tree.kernel_log))
    return root


def tar_bytes(directory: Path, arcname: str) -> bytes:
    """``directory`` as a tar archive (symlinks kept) named ``arcname``, for docker's put_archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(directory), arcname=arcname)
    return buffer.getvalue()


# Bus ids of the mock NVML profiles (gpuprov/lab/mocknvml/profiles).
H200X2_BUS = ["0000:00:06.0", "0000:00:07.0"]
A100X8_BUS = [
    "0000:07:00.0",
    "0000:0f:00.0",
    "0000:47:00.0",
    "0000:4e:00.0",
    "0000:87:00.0",
    "0000:90:00.0",
    "0000:b7:00.0",
    "0000:bd:00.0",
]


def healthy_h200(**overrides: object) -> Tree:
    """The real 2x H200 VM: no EFI (hypervisor), Gen5 x16, 256 GiB BAR1 above 4 GiB, NVMe, 256 GB RAM."""
    tree = Tree(gpus=[Gpu(bus, bar1_start=0x38000000000 + i * 0x8000000000) for i, bus in enumerate(H200X2_BUS)])
    for key, value in overrides.items():
        setattr(tree, key, value)
    return tree
