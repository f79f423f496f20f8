#!/usr/bin/env python3
"""Speed of reading Xid and SXid events from a kernel log: what ``gpuprov doctor`` and the monitoring role's GPU
health collector (``gpuprov-gpu-health.timer``, once a minute) do with each boot's log.

The log is N lines: one in ten cycles through the recorded NVIDIA lines of
``tests/data/kernel-log/gpu-health.log``, the rest are other kernel messages. Printed: the median and best of
``--runs`` timings of ``scan_kernel_log`` (parse and classify) and of ``render`` (the Prometheus text). Not a
test: nothing here asserts a time.

Usage::

    .venv/bin/python benchmarks/kernel_log_bench.py --lines 200000 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpu_health_metrics import render
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_kernel_log import scan_kernel_log

ROOT = Path(__file__).resolve().parents[1]
OTHER = "2026-11-28T09:12:01+0000 gpu07 kernel: mlx5_core 0000:17:00.0 eth0: Link up"


def main() -> int:
    """Time the scan and the rendering; print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    nvidia = (ROOT / "tests" / "data" / "kernel-log" / "gpu-health.log").read_text(encoding="utf-8").splitlines()
    text = "\n".join(nvidia[(i // 10) % len(nvidia)] if i % 10 == 0 else OTHER for i in range(args.lines))
    scans, renders = [], []
    for _ in range(args.runs):
        start = time.perf_counter()
        events = scan_kernel_log(text)
        scans.append(time.perf_counter() - start)
        start = time.perf_counter()
        render({"available": True, "events": events})
        renders.append(time.perf_counter() - start)
    print(f"{args.lines} lines, {len(events)} events")
    print(f"scan_kernel_log: median {statistics.median(scans):.3f} s, best {min(scans):.3f} s")
    print(f"render: median {statistics.median(renders) * 1000:.1f} ms, best {min(renders) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
