"""Start-up phases of a worker process, and the timing of a run that ``gpuprov images run`` reports from them.

A worker marks the end of each phase with ``time.monotonic()`` (:class:`Startup`) and sends the marks in its
``start`` event, the one that tells its supervisor it is ready (:mod:`gpuprov.images.worker`). The supervisor
notes when it spawned the process and when each worker's first and last results came in
(:class:`~gpuprov.images.supervisor.SlotState`). Both use the same clock: ``CLOCK_MONOTONIC``, which Linux
keeps for the whole system, so a worker's marks and its supervisor's times can be subtracted from each other.

The phases, in order (:data:`PHASES`); each one's seconds run from the end of the one before, the first from
the spawn:

``process``  the interpreter starts, imports gpuprov's worker modules and reads its configuration
``imports``  torch and torchvision imported
``device``   the pinned device opened and checked (on a GPU: the CUDA context)
``model``    the task made: a model loaded and, for TorchScript, frozen for inference
``kernel``   the fused crop+resize kernel compiled (GPU model tasks; nothing to do elsewhere)
``probe``    the batch-size probe (``--batch auto`` on a GPU; nothing to do for ``--batch N``)
``compile``  ``torch.compile`` of the model for the full batch, built or loaded from the machine's cache
             (``--compile``, :mod:`gpuprov.images.compiled`; nothing to do when the model runs uncompiled)
``warmup``   the first batch: a full batch of synthetic images on a GPU (cuDNN autotunes its shapes); one
             small image on a CPU. On a GPU the JPEG decoder's first batch (nvJPEG makes its handle and
             buffers) runs in a thread from the end of ``device``, beside ``model`` to ``warmup``, and
             ``warmup`` also waits for it to end (``probe``, when it runs, waits for it first)
``queue``    the queue opened and the worker's threads started; the worker is ready
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuprov.images.slots import Slot

PHASES = ("process", "imports", "device", "model", "kernel", "probe", "compile", "warmup", "queue")
"""The start-up phases a worker marks, in order (see the module docstring)."""


@dataclass
class Startup:
    """The phases a worker has finished so far: phase name -> ``time.monotonic()`` at its end, seconds."""

    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, phase: str) -> None:
        """Record that ``phase`` (one of :data:`PHASES`) ended now. Raises ``ValueError`` for another name."""
        if phase not in PHASES:
            raise ValueError(f"unknown start-up phase {phase!r}; expected one of {', '.join(PHASES)}")
        self.marks[phase] = time.monotonic()


def phase_seconds(marks: Mapping[str, float], spawned: float) -> dict[str, float]:
    """Seconds each phase took, in :data:`PHASES` order: from the end of the phase marked before it (the first
    from ``spawned``, the supervisor's ``time.monotonic()`` when it started the process). Phases without a mark
    (a worker that has not got there, or an older worker) are left out."""
    out: dict[str, float] = {}
    before = spawned
    for phase in PHASES:
        if phase in marks:
            out[phase] = round(max(0.0, marks[phase] - before), 3)
            before = marks[phase]
    return out


def startup_line(seconds: Mapping[str, float]) -> str:
    """One line of a worker's start-up: ``ready in 9.8 s (process 0.4, imports 2.1, ... queue 0.1 s)``."""
    if not seconds:
        return "start-up not reported"
    parts = ", ".join(f"{phase} {s:.1f}" for phase, s in seconds.items())
    return f"ready in {sum(seconds.values()):.1f} s ({parts} s)"


class WorkerState(Protocol):
    """What the supervisor knows of a worker (:class:`~gpuprov.images.supervisor.SlotState`) that a report reads:
    times are ``time.monotonic()`` seconds."""

    slot: Slot
    device: str | None
    batch: int
    failed: int
    restarts: int
    forked: bool  # the current process came from the fork server
    spawned: float | None  # the current process's spawn
    startup: dict[str, float]  # its start-up marks
    compile: dict[str, Any] | None  # its compile choice: mode (None: eager), requested, reason
    first_result: float | None  # the current process's first result event
    first_done: int  # images the slot had done then
    first_batch: dict[str, float]  # the stage seconds of its first result event (gpuprov.images.stages.STAGE_KEYS)
    last_result: float | None  # its latest result event

    @property
    def total_done(self) -> int: ...


def worker_phases(state: WorkerState) -> dict[str, float]:
    """The seconds of each phase the worker's current process has finished (:func:`phase_seconds` from its
    spawn); empty before its first spawn."""
    return phase_seconds(state.startup, state.spawned) if state.spawned is not None else {}


def worker_record(state: WorkerState, started: float) -> dict[str, Any]:
    """A worker's entry of the run's JSON report: its slot, device, batch, compile choice (``mode``: None when the
    model runs uncompiled; ``requested``, ``reason``; None for a built-in task), counts, restarts, whether the fork
    server started it (``forked``), start-up seconds per phase (:func:`phase_seconds`), relative to ``started`` (the
    run's start) when it was spawned and when its first and last results came in, and ``first_batch_s``: the seconds
    each stage had spent by then (claim, read, decode, task, commit, and the main thread's wait for a decoded batch;
    the stages run in threads of their own, so the figures overlap rather than add up). After a restart the spawn,
    start-up, compile choice and first result are the last process's; counts and restarts are the slot's."""
    seconds = worker_phases(state)
    return {
        "slot": state.slot.name,
        "uuid": state.slot.uuid,
        "device": state.device,
        "batch": state.batch,
        "compile": state.compile,
        "done": state.total_done,
        "failed": state.failed,
        "restarts": state.restarts,
        "forked": state.forked,
        "spawned_s": _since(state.spawned, started),
        "startup_s": seconds,
        "ready_s": round(sum(seconds.values()), 3) if PHASES[-1] in seconds else None,
        "first_result_s": _since(state.first_result, started),
        "last_result_s": _since(state.last_result, started),
        "first_batch_s": {k: round(v, 3) for k, v in state.first_batch.items()},
    }


def steady_rate(states: Sequence[WorkerState]) -> float | None:
    """Images per second from the run's first result to its last: the images done after the first result
    event of any worker over the seconds to the last one; None with fewer than two result events apart in
    time."""
    firsts = [(st.first_result, st.first_done) for st in states if st.first_result is not None]
    lasts = [st.last_result for st in states if st.last_result is not None]
    if not firsts or not lasts:
        return None
    first, first_done = min(firsts)
    last = max(lasts)
    if last <= first:
        return None
    return (sum(st.total_done for st in states) - first_done) / (last - first)


def run_report(states: Sequence[WorkerState], started: float, counts: Mapping[str, int],
               ending: Mapping[str, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """The JSON report of a run that has ended now (``gpuprov images run --json``): ``counts`` (rows, failed,
    dead), images done, seconds since ``started`` (the run's ``time.monotonic()`` at its start) and the rate
    over them, the first and last result (seconds after ``started``), the steady rate between them
    (:func:`steady_rate`), the steps of its end (``ending``: step -> ``time.monotonic()``; in ``ending_s`` as
    seconds after ``started``, in the order they came) and one :func:`worker_record` per worker."""
    images = sum(st.total_done for st in states)
    wall = max(time.monotonic() - started, 1e-9)
    steady = steady_rate(states)
    firsts = [st.first_result for st in states if st.first_result is not None]
    lasts = [st.last_result for st in states if st.last_result is not None]
    return {
        **counts,
        "images": images,
        "restarts": sum(st.restarts for st in states),
        "wall_s": round(wall, 3),
        "images_per_s": round(images / wall, 2),
        "first_result_s": _since(min(firsts, default=None), started),
        "last_result_s": _since(max(lasts, default=None), started),
        "steady_images_per_s": None if steady is None else round(steady, 2),
        "ending_s": {step: _since(when, started) for step, when in sorted((ending or {}).items(), key=lambda s: s[1])},
        "monotonic_start": started,
        "phases": list(PHASES),
        "workers": [worker_record(st, started) for st in states],
    }


def _since(when: float | None, started: float) -> float | None:
    return None if when is None else round(when - started, 3)
