"""Start-up phases of a worker and the run's timing report (gpuprov.images.startup), without worker processes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gpuprov.images.slots import Slot
from gpuprov.images.startup import PHASES, Startup, phase_seconds, run_report, startup_line, steady_rate


def _state(name: str, **kw: Any) -> Any:
    fields = {"slot": Slot(name), "device": "cpu", "batch": 32, "failed": 0, "restarts": 0, "forked": False,
              "spawned": None, "startup": {}, "compile": None, "first_result": None, "first_done": 0,
              "first_batch": {}, "last_result": None, "total_done": 0}  # fmt: skip
    return SimpleNamespace(**{**fields, **kw})


def test_phase_seconds_run_from_the_spawn_and_each_previous_mark_in_phase_order() -> None:
    marks = {"process": 100.5, "imports": 102.5, "model": 103.0, "queue": 103.25}  # device..warmup not reached
    assert phase_seconds(marks, spawned=100.0) == {"process": 0.5, "imports": 2.0, "model": 0.5, "queue": 0.25}
    assert list(phase_seconds(dict(reversed(marks.items())), 100.0)) == ["process", "imports", "model", "queue"]
    assert phase_seconds({}, 100.0) == {}


def test_startup_line_names_every_phase_and_the_total() -> None:
    line = startup_line({"process": 0.4, "imports": 2.1, "queue": 0.06})
    assert line == "ready in 2.6 s (process 0.4, imports 2.1, queue 0.1 s)"
    assert startup_line({}) == "start-up not reported"


def test_startup_marks_only_known_phases_in_the_order_made() -> None:
    startup = Startup()
    for phase in PHASES:
        startup.mark(phase)
    assert list(startup.marks) == list(PHASES)
    assert list(startup.marks.values()) == sorted(startup.marks.values())
    with pytest.raises(ValueError, match="unknown start-up phase 'ready'"):
        startup.mark("ready")


def test_steady_rate_counts_the_images_after_the_first_result_to_the_last() -> None:
    states = [
        _state("cpu0", first_result=10.0, first_done=32, last_result=14.0, total_done=96),
        _state("cpu1", first_result=11.0, first_done=32, last_result=15.0, total_done=96),
    ]
    assert steady_rate(states) == pytest.approx((192 - 32) / (15.0 - 10.0))
    assert steady_rate([_state("cpu0", first_result=10.0, first_done=8, last_result=10.0, total_done=8)]) is None
    assert steady_rate([_state("cpu0")]) is None


def test_run_report_puts_each_workers_phases_and_the_results_after_the_run_start() -> None:
    marks = {phase: 50.0 + i for i, phase in enumerate(PHASES, start=1)}
    choice = {"mode": "default", "requested": "auto", "reason": "auto on a GPU"}
    first_batch = {"claim_s": 0.0104, "read_s": 0.02, "decode_s": 0.5, "task_s": 0.25, "commit_s": 0.01, "wait_s": 1.5}
    ready = _state("cpu0", spawned=50.0, startup=marks, first_result=60.0, first_done=32, last_result=62.0,
                   total_done=64, compile=choice, first_batch=first_batch)  # fmt: skip
    never_ready = _state("cpu1", spawned=51.0)
    report = run_report([ready, never_ready], 49.0, {"rows": 64, "failed": 0, "dead": 0},
                        {"workers_exited": 62.5, "mps_stopped": 62.75, "manifest_written": 62.25})  # fmt: skip
    assert list(report["ending_s"].items()) == [("manifest_written", 13.25), ("workers_exited", 13.5),
                                                 ("mps_stopped", 13.75)]  # in the order they came  # fmt: skip
    assert (report["rows"], report["images"], report["restarts"]) == (64, 64, 0)
    assert (report["first_result_s"], report["last_result_s"], report["steady_images_per_s"]) == (11.0, 13.0, 16.0)
    first, second = report["workers"]
    assert first["startup_s"] == dict.fromkeys(PHASES, 1.0) and first["ready_s"] == len(PHASES)
    assert (first["spawned_s"], first["first_result_s"], first["last_result_s"], first["done"]) == (1.0, 11.0, 13.0, 64)
    assert (first["compile"], second["compile"]) == (choice, None)
    assert (second["startup_s"], second["ready_s"], second["first_result_s"], second["last_result_s"]) == (
        {}, None, None, None)  # fmt: skip
    assert first["first_batch_s"] == {**first_batch, "claim_s": 0.01} and second["first_batch_s"] == {}
    assert report["phases"] == list(PHASES)
