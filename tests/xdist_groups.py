"""Which pytest-xdist group a test runs in, and the order the groups start in (used by tests/conftest.py and
.ci/group_seconds.py; plain Python, no pytest).

A group runs on one worker from start to end: each test file is a group (its module-scoped fixtures - a
converged container, a lab fleet - are built once; the one file that runs ``gpuprov lab``'s own hosts,
``gpuprov-lab-N``, is test_lab.py, and containers that other tests start carry no lab label, so its ``lab
down`` leaves them alone); each Molecule scenario is a group of its own (their platform names differ).
"""

from __future__ import annotations

import json
from pathlib import Path

#: Seconds each group took in a CI run, heaviest first (written by .ci/group_seconds.py from its JUnit report).
GROUP_SECONDS_FILE = Path(__file__).with_name("data") / "ci-group-seconds.json"


def group_of(relative_path: str, scenario: str | None = None) -> str:
    """The group of a test in file ``relative_path`` (``tests/...py``); ``scenario`` is test_molecule's parameter."""
    name = relative_path.rsplit("/", 1)[-1]
    if name == "test_molecule.py" and scenario is not None:
        return f"molecule-{scenario}"
    return relative_path


def group_seconds() -> dict[str, float]:
    """:data:`GROUP_SECONDS_FILE` as ``{group: seconds}``; empty when it is missing."""
    if not GROUP_SECONDS_FILE.is_file():
        return {}
    data = json.loads(GROUP_SECONDS_FILE.read_text(encoding="utf-8"))
    return {str(group): float(seconds) for group, seconds in data.items()}
