"""Run the ``nvml_facts`` module on this machine through ansible-runner (local connection) and print JSON.

Used to capture ``module-facts.json`` on the real H200 host (see README.md beside this file): it goes through
the same path as ``gpuprov facts FILE`` (the play :data:`gpuprov.facts.FACTS_PLAY`, :func:`gpuprov.runner.run_playbook`,
facts from ``runner_on_ok`` events) with a hand-written one-host inventory instead of a rendered fleet.

Usage: ``python3 tests/data/real-h200/module_local.py [--check]`` from the repository root. The target's Python
is ``$GPUPROV_TARGET_PYTHON``, else ``/usr/bin/python3`` (a system Python without pynvml, so the run proves that
the action plugin ships it), else Ansible's discovery.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import yaml

from gpuprov.facts import FACTS_PLAY, FactsEvents
from gpuprov.resources import roles_dir
from gpuprov.runner import RunRequest, run_playbook


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="gpuprov-facts-") as tmp:
        root = Path(tmp)
        inventory = root / "inventory" / "hosts.yml"
        inventory.parent.mkdir()
        python = os.environ.get("GPUPROV_TARGET_PYTHON") or (
            "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "auto_silent"
        )
        host = {"ansible_connection": "local", "ansible_python_interpreter": python}
        inventory.write_text(yaml.safe_dump({"gpuprov": {"hosts": {"localhost": host}}}), encoding="utf-8")
        playbook = root / "facts.yml"
        playbook.write_text(yaml.safe_dump(FACTS_PLAY, sort_keys=False), encoding="utf-8")
        run_dir = root / "run"
        run_dir.mkdir()
        events = FactsEvents()
        request = RunRequest(inventory=inventory.parent, playbook=playbook, roles_path=roles_dir(), run_dir=run_dir,
                             check="--check" in argv)
        result = run_playbook(request, on_event=events)
        outcome = result.hosts.get("localhost")
        out = {
            "target_python": python,
            "status": result.status,
            "rc": result.rc,
            "changed": outcome.changed if outcome else None,
            "failures": outcome.failures if outcome else None,
            "facts": events.facts.get("localhost"),
        }
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0 if result.rc == 0 and out["facts"] is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
