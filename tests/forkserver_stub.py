"""A fork server for the tests of :mod:`gpuprov.images.forkserver`: the real server loop
(:func:`gpuprov.images.forkserver_serve.serve`) without torch: nothing is preloaded, and each child runs
:func:`report` in place of a worker.

    python tests/forkserver_stub.py SOCKET KEEP_WARM_S

A child asks to die with its run (:func:`gpuprov.images.worker.die_with_supervisor`), reads one line from stdin,
prints one JSON line of what it got (``STUB_VALUE`` from its environment, its working folder, umask, CPU affinity,
the stdin line, whether the pidfd variable was left in its environment), then acts on ``STUB_MODE``
(``now3``: exits with 3 before all that): ``exit3``
exits with 3, ``wait`` sleeps for two minutes, ``later3`` exits with 3 once stdin reaches its end, ``later0``
then exits 0 as a worker does (:func:`gpuprov.images.forkserver.say_exit`, ``os._exit``), anything else exits 0.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

from gpuprov.images.forkserver import PIDFD_ENV, say_exit
from gpuprov.images.forkserver_serve import serve
from gpuprov.images.worker import die_with_supervisor


def _umask() -> str:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("Umask:"):
            return line.split()[1]
    return "?"


def report() -> None:
    if os.environ.get("STUB_MODE") == "now3":  # dies at once, before it reads its configuration
        sys.exit(3)
    die_with_supervisor()
    line = sys.stdin.readline().strip()
    print(json.dumps({"value": os.environ.get("STUB_VALUE"), "cwd": str(Path.cwd()), "umask": _umask(),
                      "affinity": sorted(os.sched_getaffinity(0)), "stdin": line,
                      "pidfd_env_left": PIDFD_ENV in os.environ}), flush=True)  # fmt: skip
    mode = os.environ.get("STUB_MODE", "")
    if mode == "exit3":
        sys.exit(3)
    if mode == "wait":
        time.sleep(120)
    if mode == "later3":
        sys.stdin.read()
        sys.exit(3)
    if mode == "later0":  # as a worker ends: at once, without the interpreter's shutdown
        sys.stdin.read()
        say_exit(0)
        os._exit(0)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="forkserver: %(message)s")  # as the real server logs, to stderr
    serve(Path(sys.argv[1]), float(sys.argv[2]), lambda: None, report)
