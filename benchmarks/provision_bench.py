#!/usr/bin/env python3
"""Provisioning speed on the lab fleet: wall time of a no-op re-run of the whole site (issue 9).

For each host count (``--hosts 1 8``) the lab is brought to that size (``gpuprov lab up``), the site
is applied once to converge (not timed), then each tuning in ``--tunings`` re-runs the whole site
``--runs`` times with no change to make. Printed per run: wall time (ansible-runner start to end),
the slowest host's span, and a per-role breakdown (sum of task durations per role on the slowest
host, from ansible-runner's ``runner_on_*`` events - never from stdout) and the controller's CPU seconds
(:func:`controller_cpu_s`), in all and per host. ``--json PATH`` keeps it all.

Tunings (environment for ansible-playbook over gpuprov's own, and forks):

* ``baseline``  - Ansible's defaults: no pipelining, no SSH connection reuse, forks 5.
* ``tuned``     - what gpuprov ships (gpuprov/ansible_settings.py): pipelining, ControlPersist 60 s,
                  facts gathered once per host and only the subsets the roles use, forks >= hosts.
* ``factcache`` - ``tuned`` plus a jsonfile fact cache (facts of the converge run are reused, so no
                  ``setup`` call at all; stale facts are the price, see docs/benchmarks.md).
* ``mitogen``   - ``tuned`` with the mitogen_linear strategy (needs ``pip install mitogen``).

Usage (root, Docker, lab images; results go to docs/benchmarks.md by hand)::

    .venv/bin/python benchmarks/provision_bench.py --hosts 1 8 --runs 3 --json /tmp/provision.json

Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuprov.ansible_settings import BASE_ENV
from gpuprov.fleet import load_fleet
from gpuprov.lab import containers, fleetfile, repo, state
from gpuprov.render import render_inventory
from gpuprov.resources import playbooks_dir
from gpuprov.runner import RunRequest, RunResult, new_run_dir, run_playbook

TUNINGS = ("baseline", "tuned", "factcache", "mitogen")


def tuning_env(name: str, hosts: int, cache_dir: Path) -> tuple[dict[str, str], int]:
    """``(environment overrides, forks)`` for tuning ``name``; see the module docstring."""
    forks = max(10, hosts)
    if name == "baseline":
        return {"ANSIBLE_PIPELINING": "False", "ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o ControlPath=none"}, 5
    if name == "tuned":
        return {}, forks
    if name == "factcache":
        return {"ANSIBLE_CACHE_PLUGIN": "jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache_dir),
                "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400"}, forks
    if name == "mitogen":
        spec = importlib.util.find_spec("ansible_mitogen")
        if spec is None or spec.origin is None:
            raise SystemExit("the mitogen tuning needs `pip install mitogen`")
        plugins = Path(spec.origin).parent / "plugins" / "strategy"
        return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}, forks
    raise SystemExit(f"unknown tuning {name!r}: choose from {', '.join(TUNINGS)}")


def run_site(inventory: Path, state_root: Path, env: dict[str, str], forks: int) -> RunResult:
    """One whole-site run on the rendered ``inventory``."""
    run_dir = new_run_dir(state_root, "bench")
    request = RunRequest(inventory=inventory, playbook=playbooks_dir() / "site.yml",
                         run_dir=run_dir, forks=forks, env=env)
    return run_playbook(request)


def controller_cpu_s() -> float:
    """CPU seconds (user + system) of this process and every child it has waited for: gpuprov's runner and
    ansible-playbook with its forks and SSH clients - the controller's share of a run. The lab hosts' own
    processes (sshd and the modules in each container) are not our children and are not counted."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def describe(result: RunResult) -> dict[str, Any]:
    """Wall time, changed/failed counts and the slowest host's per-role task time (seconds)."""
    slowest = max(result.hosts.values(), key=lambda h: h.duration_s)
    return {
        "wall_s": round((result.finished - result.started).total_seconds(), 2),
        "slowest_host": slowest.name,
        "slowest_host_s": round(slowest.duration_s, 2),
        "changed": sum(h.changed for h in result.hosts.values()),
        "failed_hosts": result.failed_hosts,
        "roles_s": {role: round(t.duration_s, 2) for role, t in slowest.roles.items()},
        "tasks": {role: t.tasks for role, t in slowest.roles.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tunings", nargs="+", default=["baseline", "tuned", "factcache"], choices=TUNINGS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, dest="json_path")
    args = parser.parse_args(argv)

    lab_dir = state.state_dir()
    work = Path(tempfile.mkdtemp(prefix="gpuprov-provision-bench-"))
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
                              "machine": platform.platform(), "base_env": BASE_ENV, "points": []}
    for count in args.hosts:
        hosts = containers.up(count, lab_dir=lab_dir)
        fleet_path = fleetfile.write_fleet_file(work / f"fleet-{count}.yml", hosts, state.key_path(lab_dir),
                                                state.known_hosts_path(lab_dir), repo.lab_fingerprint(lab_dir))
        inventory = render_inventory(load_fleet(fleet_path), work / f"inventory-{count}")
        cache = work / f"facts-{count}"
        t0 = time.monotonic()
        converge = run_site(inventory, work, *tuning_env("factcache", count, cache))  # fills the fact cache too
        print(f"{count} host(s): converge {time.monotonic() - t0:.1f} s, failed {converge.failed_hosts}", flush=True)
        if converge.failed_hosts:
            print(json.dumps({h: r.failures for h, r in converge.hosts.items() if r.failures}, indent=1)[:4000])
            return 3
        for tuning in args.tunings:
            env, forks = tuning_env(tuning, count, cache)
            for i in range(args.runs):
                cpu_before = controller_cpu_s()
                result = run_site(inventory, work, env, forks)
                cpu = controller_cpu_s() - cpu_before
                point = {"hosts": count, "tuning": tuning, "run": i + 1, "forks": forks, **describe(result),
                         "controller_cpu_s": round(cpu, 2), "controller_cpu_per_host_s": round(cpu / count, 2)}
                report["points"].append(point)
                roles = ", ".join(f"{r} {s:.1f}" for r, s in point["roles_s"].items())
                print(f"{count} host(s) {tuning:9s} run {i + 1}: {point['wall_s']:6.1f} s wall, "
                      f"controller CPU {cpu:.1f} s ({cpu / count:.1f} s per host), changed {point['changed']}, "
                      f"slowest host {point['slowest_host_s']:.1f} s ({roles})", flush=True)
    if args.json_path:
        args.json_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
