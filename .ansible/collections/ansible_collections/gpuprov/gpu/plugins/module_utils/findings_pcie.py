# Copyright: gpuprov contributors
# Apache-2.0
"""bios_check rules on PCIe: each GPU's link against the slot the fleet file declares, and what stands between
GPUs for peer-to-peer traffic (a translating IOMMU, ACS redirection on the bridges above them). Pure Python 3.8,
no Ansible; :func:`~findings.evaluate` calls :func:`check_links` and :func:`check_p2p`."""


from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_bus, usable_gpus


def check_links(out, gpus, s):
    """pcie_link_degraded and pcie_link_low_under_load findings, per usable GPU."""
    load = s.get("load_utilization_pct") or 50
    width_cap = s.get("pcie_width") or 16
    gen_cap = s.get("pcie_gen")
    for gpu in usable_gpus(gpus):
        pcie = gpu.get("pcie") or {}
        bus = norm_bus(gpu.get("pci_bus_id_sysfs")) or "gpu{}".format(gpu.get("index"))
        gen_max, gen_gpu, width_max = pcie.get("gen_max"), pcie.get("gen_gpu_max"), pcie.get("width_max")
        gen_cur, width_cur = pcie.get("gen_current"), pcie.get("width_current")
        util = (gpu.get("live") or {}).get("utilization_gpu_pct")
        gen_wanted = min(gen_gpu, gen_cap) if isinstance(gen_gpu, int) and isinstance(gen_cap, int) else gen_gpu
        link = (
            f"Gen{gen_max} x{width_max} (now Gen{gen_cur} x{width_cur}; GPU capable of Gen{gen_gpu}, "
            f"slot expected at Gen{gen_wanted} x{width_cap}; utilisation {util}%)"
        )
        degraded_gen = isinstance(gen_max, int) and isinstance(gen_wanted, int) and gen_max < gen_wanted
        degraded_width = isinstance(width_max, int) and width_max < width_cap
        if degraded_gen or degraded_width:
            out.add(
                "pcie_link_degraded",
                "fail",
                bus,
                "GPU {} ({}): the slot trained at {}".format(bus, gpu.get("name"), link),
                "reseat the card / move it to an x%d Gen%s slot / check the riser and cabling; set the "
                "slot's link speed to Auto/Gen%s in firmware; a board built for fewer lanes or an older generation "
                "is declared in the fleet file (bios_check.pcie_width, bios_check.pcie_gen)"
                % (width_cap, gen_wanted or "4", gen_wanted or "4"),
            )
        elif (
            isinstance(util, (int, float))
            and util >= load
            and (
                (isinstance(gen_cur, int) and isinstance(gen_max, int) and gen_cur < gen_max)
                or (isinstance(width_cur, int) and isinstance(width_max, int) and width_cur < width_max)
            )
        ):
            out.add(
                "pcie_link_low_under_load",
                "warn",
                bus,
                f"GPU {bus} under load: link {link}",
                "check the slot's ASPM / link power management settings in firmware and the riser; an idle "
                "GPU dropping its link speed is normal, a busy one is not",
            )


def check_p2p(out, platform, gpus, s):
    """iommu_translating and acs_redirect findings, on hosts with two GPUs or more."""
    pci = platform.get("pci") or {}
    gpu_count = max(len(pci.get("gpu_functions") or []), len(usable_gpus(gpus)))
    if gpu_count < 2:
        return
    mmu = platform.get("iommu") or {}
    if mmu.get("mode") == "translated":
        out.add(
            "iommu_translating",
            "info" if s.get("vfio_hypervisor") else "warn",
            "iommu",
            "the IOMMU translates GPU DMA ({}; kernel arguments {}): peer-to-peer traffic between GPUs is "
            "redirected or blocked (NCCL all-reduce hangs)".format(mmu.get("source"), mmu.get("cmdline_args")),
            "add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX), or turn off VT-d / AMD-Vi in "
            "firmware if nothing needs it; keep it on VFIO hosts",
        )
    for bridge in pci.get("bridges") or []:
        bits = [b for b in bridge.get("acs_ctl") or [] if b in ("ReqRedir", "CmpltRedir", "UpstreamFwd", "SrcValid")]
        redirect = [b for b in bits if b != "SrcValid"]
        if not redirect:
            continue
        out.add(
            "acs_redirect",
            "info" if s.get("vfio_hypervisor") else "warn",
            bridge["bus_id"],
            "PCIe bridge {} above GPU(s) {} has ACS {} set ({}): GPU peer-to-peer goes through the root complex "
            "or is blocked (NCCL all-reduce hangs)".format(
                bridge["bus_id"], ", ".join(bridge.get("gpus") or []), " ".join(bits), bridge.get("source")
            ),
            "disable ACS (PCIe ACS / ACS control) for the switch and root ports in firmware setup, or clear it "
            "on {} at every boot with a unit; not on VFIO passthrough hosts, where ACS provides isolation".format(
                bridge["bus_id"]
            ),
        )

