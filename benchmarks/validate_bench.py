#!/usr/bin/env python3
"""Speed of ``gpuprov validate`` on a generated fleet file of N hosts (issue 9 item 3: 100 hosts in <= 0.5 s).

The fleet is ``inventory/example.yml`` with its hosts replaced by N hosts that cycle through the example's
groups (so every host merges group settings and is checked against the compatibility matrix). Printed: the
median and best of ``--runs`` timings of (a) the whole command in a fresh process
(``gpuprov validate --no-file-checks FILE``: interpreter start, imports, validation, summary) and (b)
:func:`gpuprov.fleet.load_fleet` alone in this process. Not a test: nothing here asserts a time.

Usage::

    .venv/bin/python benchmarks/validate_bench.py --hosts 100 --runs 10
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gpuprov.fleet import load_fleet

ROOT = Path(__file__).resolve().parents[1]


def fleet_of(hosts: int) -> dict[str, Any]:
    """The example fleet with ``hosts`` hosts (``gpu001``...), each in turn in one of the example's groups that
    set ``gpus``."""
    document: dict[str, Any] = yaml.safe_load((ROOT / "inventory" / "example.yml").read_text(encoding="utf-8"))
    groups = sorted(name for name, group in (document.get("groups") or {}).items()
                    if "gpus" in ((group or {}).get("settings") or {}))
    document["hosts"] = {f"gpu{i:03d}": {"address": f"10.30.{i // 250}.{i % 250 + 1}",
                                         **({"groups": [groups[i % len(groups)]]} if groups else {})}
                         for i in range(1, hosts + 1)}
    return document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuprov-validate-bench-") as tmp:
        path = Path(tmp) / "fleet.yml"
        path.write_text(yaml.safe_dump(fleet_of(args.hosts), sort_keys=False), encoding="utf-8")
        command = [str(Path(sys.executable).parent / "gpuprov"), "validate", "--no-file-checks", str(path)]
        cli: list[float] = []
        for _ in range(args.runs):
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            cli.append(time.perf_counter() - start)
            if done.returncode != 0:
                print((done.stdout + done.stderr)[-2000:], file=sys.stderr)
                return 1
        inproc: list[float] = []
        for _ in range(args.runs):
            start = time.perf_counter()
            fleet = load_fleet(path)
            inproc.append(time.perf_counter() - start)
        print(f"{len(fleet.hosts)} hosts, {args.runs} runs")
        print(f"gpuprov validate (new process): median {statistics.median(cli):.3f} s, best {min(cli):.3f} s")
        print(f"load_fleet (in process):        median {statistics.median(inproc):.3f} s, best {min(inproc):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
