#!/usr/bin/env python3
"""Sum a pytest JUnit XML report's test times per pytest-xdist group (tests/conftest.py's ``xdist_group_of``).

    .venv/bin/python -m pytest ... --junitxml=report.xml
    python .ci/group_seconds.py report.xml > tests/data/ci-group-seconds.json

The JSON (``{group: seconds}``, heaviest first) is what tests/conftest.py orders the groups by, so that the
longest group starts first; a group it does not name falls back to its cost class. Regenerate it from a CI run's
report when the slow tests change. Exit 2 for a report that cannot be read.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from xdist_groups import group_of  # tests/ is on the path above, not a package


def case_group(classname: str, name: str) -> str:
    """The group of a JUnit test case (``classname``: the dotted module path, plus a class if any; ``name``: the
    test's name with its parameters)."""
    parts = classname.split(".")
    module = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
    scenario = name.split("[", 1)[1].rstrip("]") if "[" in name else None
    return group_of("/".join(parts[: module + 1]) + ".py", scenario)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        root = ET.parse(Path(argv[0])).getroot()
    except (OSError, ET.ParseError) as exc:
        print(f"{argv[0]}: {exc}", file=sys.stderr)
        return 2
    seconds: dict[str, float] = defaultdict(float)
    for case in root.iter("testcase"):
        seconds[case_group(case.get("classname", ""), case.get("name", ""))] += float(case.get("time") or 0)
    ordered = dict(sorted(((g, round(s)) for g, s in seconds.items()), key=lambda item: -item[1]))
    json.dump(ordered, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
