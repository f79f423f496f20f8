# Copyright: gpuprov contributors
# Apache-2.0
"""The verification ladder's results: one rung's :func:`step` and the whole :func:`report`. Pure Python 3.8."""


from __future__ import annotations


def step(name, status, evidence=None, reason=None, duration_s=None):
    """One rung's result: ``{name, status, evidence, reason, duration_s}``."""
    return {"name": name, "status": status, "evidence": evidence if evidence is not None else {},
            "reason": reason, "duration_s": duration_s}


def report(steps):
    """``{status, summary {pass, fail, skip}, steps}``; status is fail when any step failed."""
    summary = {"pass": 0, "fail": 0, "skip": 0}
    for entry in steps:
        summary[entry["status"]] = summary.get(entry["status"], 0) + 1
    return {"status": "fail" if summary["fail"] else "pass", "summary": summary, "steps": steps}
