# Copyright: gpuprov contributors
# Apache-2.0
"""The monitoring role's textfile collector: the kernel log's Xid and SXid events, classified after NVIDIA's Xid
catalogue (module_utils/xid.py), as Prometheus metrics for node_exporter's textfile collector.

Run on a host by ``gpuprov-gpu-health.service`` (a timer starts it every minute)::

    python3 -m ansible_collections.gpuprov.gpu.plugins.module_utils.gpu_health_metrics --output FILE

The file is written whole to a temporary name beside it and renamed, so node_exporter never reads half of it.
Counters count the events in the kernel log since boot (``journalctl -k -b``, else ``/dev/kmsg``), so they restart
at zero after a reboot. Pure Python 3.8, standard library only: the role copies this file and the module_utils
it imports to the host.
"""


from __future__ import annotations

import argparse
import os
import sys
import time

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_bus
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_kernel_log import kernel_log
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_read import list_dir, read_file

#: Metric name -> (type, help). The alert rules (roles/monitoring/files/prometheus) read only these names.
METRICS = {
    "gpuprov_gpu_xid_events_total": ("counter", "Xid events of the GPU in the kernel log since boot, by Xid and "
                                                "the class of NVIDIA's Xid catalogue"),
    "gpuprov_nvswitch_sxid_events_total": ("counter", "SXid events of the NVSwitch in the kernel log since boot"),
    "gpuprov_gpu_kernel_log_readable": ("gauge", "1 when the collector could read the kernel log, else 0"),
    "gpuprov_gpu_health_collected_timestamp_seconds": ("gauge", "When the collector last ran (Unix time)"),
}


def gpu_uuids(proc_root="/proc"):
    """PCI bus id -> GPU UUID from the driver's ``<proc_root>/driver/nvidia/gpus/<bus id>/information``."""
    out = {}
    base = os.path.join(proc_root, "driver", "nvidia", "gpus")
    for bus in list_dir(base) or []:
        text = read_file(os.path.join(base, bus, "information")) or ""
        for line in text.splitlines():
            if line.startswith("GPU UUID:"):
                out[norm_bus(bus)] = line.split(":", 1)[1].strip()
    return out


def _labels(pairs):
    def esc(value):
        return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join('%s="%s"' % (k, esc(v)) for k, v in pairs) + "}"


def render(report, uuids=None, now=None):
    """Prometheus text exposition of a ``kernel_log`` report (module_utils/platform_kernel_log.py); ``uuids``
    maps PCI bus ids to GPU UUIDs (``gpu_uuids``); ``now`` is the collection time (s since the epoch)."""
    uuids = uuids or {}
    samples: dict[str, list[tuple[str, int]]] = {name: [] for name in METRICS}
    for event in report.get("events") or []:
        bus = event.get("bus_id") or "unknown"
        if event.get("kind") == "xid":
            uuid = [("uuid", uuids[bus])] if uuids.get(bus) else []
            samples["gpuprov_gpu_xid_events_total"].append((_labels(
                [("pci_bus_id", bus), *uuid, ("xid", event["xid"]), ("class", event.get("class") or "unknown")]),
                event.get("count") or 1))
        elif event.get("kind") == "sxid":
            samples["gpuprov_nvswitch_sxid_events_total"].append((_labels(
                [("pci_bus_id", bus), ("device", event.get("device") or ""), ("sxid", event["sxid"]),
                 ("class", event.get("class") or "unknown")]), event.get("count") or 1))
    samples["gpuprov_gpu_kernel_log_readable"].append(("", 1 if report.get("available") else 0))
    samples["gpuprov_gpu_health_collected_timestamp_seconds"].append(("", int(now if now is not None else time.time())))
    lines = []
    for name, (kind, text) in METRICS.items():
        lines += ["# HELP %s %s" % (name, text), "# TYPE %s %s" % (name, kind)]
        lines += ["%s%s %s" % (name, labels, value) for labels, value in samples[name]]
    return "\n".join(lines) + "\n"


def write(path, text):
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv=None):
    """Collect once and write the metrics file; exit 0 (an unreadable kernel log is a metric, not a failure)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="the .prom file node_exporter's textfile collector reads")
    parser.add_argument("--kernel-log", default=None, help="read this file instead of journalctl/dev/kmsg")
    args = parser.parse_args(argv)
    report = kernel_log(args.kernel_log, commands=args.kernel_log is None)
    if report.get("error"):
        sys.stderr.write("gpuprov-gpu-health: %s\n" % report["error"])
    write(args.output, render(report, gpu_uuids()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
