"""The supervisor's restart rules, driven with stand-in worker processes that exit with a given code."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuprov.exceptions import EnvironmentMissing
from gpuprov.images import supervisor
from gpuprov.images.queue import QueueUnavailable
from gpuprov.images.slots import Slot
from gpuprov.images.supervisor import SlotState, _run_slots
from gpuprov.images.worker import EXIT_QUEUE_DOWN, WorkerConfig


def _starter(codes: Callable[[int], int], starts: list[float], sleep_s: float = 0.0,
             error: str | None = None) -> Callable[[SlotState], None]:  # fmt: skip
    """A ``start`` that runs a process sleeping ``sleep_s`` then exiting with ``codes(n)`` on its n-th start."""

    def start(st: SlotState) -> None:
        st.restart_at = None
        st.error = error
        code = codes(len(starts))
        starts.append(time.monotonic())
        st.proc = subprocess.Popen([sys.executable, "-c", f"import time, sys; time.sleep({sleep_s}); sys.exit({code})"],
                                   text=True)  # fmt: skip

    return start


def _states() -> list[SlotState]:
    return [SlotState(Slot("cpu0"))]


def _stand_in_worker(monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    """Every worker process the supervisor starts runs the Python ``source`` instead (its stdin and stdout as
    the supervisor gives them)."""
    real_popen = subprocess.Popen

    def stand_in(argv: list[str], **kwargs: object) -> subprocess.Popen[str]:
        return real_popen([sys.executable, "-c", source], **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "Popen", stand_in)


def _progress_worker(count: int, pad: int = 0) -> str:
    """Source of a stand-in worker that sends ``count`` progress events (each padded by ``pad`` bytes) and its exit."""
    return (
        "import json, sys\n"
        "sys.stdin.readline()\n"
        f"for n in range({count}):\n"
        f"    event = {{'event': 'progress', 'done': n + 1, 'failed': 0, 'batch': 8, 'pad': 'x' * {pad}}}\n"
        "    print(json.dumps(event), flush=True)\n"
        f"print(json.dumps({{'event': 'exit', 'done': {count}, 'failed': 0}}), flush=True)\n"
    )


def test_a_worker_dying_on_every_start_ends_the_run_after_the_restart_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "MAX_RESTARTS", 3)
    starts: list[float] = []
    states = _states()
    with pytest.raises(EnvironmentMissing, match=r"worker exited with 1 \(3 restarts in the last 600 s\)"):
        _run_slots(states, _starter(lambda n: 1, starts), WorkerConfig("sqlite:///q", str(tmp_path)), None, 300)
    assert len(starts) == 4 and states[0].restarts == 3


def test_restarts_spread_over_time_never_end_a_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only restarts within the window count: eight deaths, never more than two in any 0.5 s."""
    monkeypatch.setattr(supervisor, "MAX_RESTARTS", 3)
    monkeypatch.setattr(supervisor, "RESTART_WINDOW_S", 0.5)
    starts: list[float] = []
    states = _states()
    _run_slots(states, _starter(lambda n: 1 if n < 8 else 0, starts, sleep_s=0.3),
               WorkerConfig("sqlite:///q", str(tmp_path)), None, 300)  # fmt: skip
    assert states[0].finished and states[0].restarts == 8


def test_an_unreachable_queue_backs_off_then_ends_naming_the_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    starts: list[float] = []
    states = _states()
    store = "redis stream gpuprov:images: Error 111 connecting to 127.0.0.1:6379. Connection refused."
    with pytest.raises(QueueUnavailable, match=r"no worker has reached the queue for \d+ s \(limit 3 s\): redis"):
        _run_slots(states, _starter(lambda n: EXIT_QUEUE_DOWN, starts, error=store),
                   WorkerConfig("sqlite:///q", str(tmp_path)), None, 3)  # fmt: skip
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) == 3 and gaps[0] >= 1.0 and gaps[1] >= 2.0, gaps  # 1 s, then 2 s
    lines = [r.getMessage() for r in caplog.records if r.name == "gpuprov.images.supervisor"]
    assert lines == [f"cpu0: {store}; restarting in 1 s", f"cpu0: {store}; restarting in 2 s"]


def test_a_queue_that_comes_back_resets_the_back_off(tmp_path: Path) -> None:
    """A worker that reached the queue (here: one start, then a clean exit) ends the run normally."""
    starts: list[float] = []
    states = _states()
    _run_slots(states, _starter(lambda n: EXIT_QUEUE_DOWN if n < 2 else 0, starts),
               WorkerConfig("sqlite:///q", str(tmp_path)), None, 300)  # fmt: skip
    assert states[0].finished and len(starts) == 3


def test_the_worker_config_travels_on_stdin_not_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ps`` shows every process's argv to every user; the queue URL's password must not be there. The real
    worker reads its config from the pipe: it tries the Redis queue the URL names (a closed port here)."""
    password = "s3cret-pw"
    argvs: list[list[str]] = []
    real_popen = subprocess.Popen

    def recording_popen(argv: list[str], **kwargs: object) -> subprocess.Popen[str]:
        argvs.append(list(argv))
        return real_popen(argv, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    config = WorkerConfig(f"redis://:{password}@127.0.0.1:1/0", str(tmp_path), task="thumbnail")
    with pytest.raises(QueueUnavailable, match=r"redis.*127\.0\.0\.1:1") as raised:
        supervisor.supervise(config, [Slot("cpu0")], lambda st, event: None, queue_timeout_s=1)
    assert argvs and all(password not in " ".join(argv) for argv in argvs), argvs
    assert password not in str(raised.value)


@pytest.mark.parametrize("given", ["", "{}\n", "not json\n", '{"queue": "sqlite:///q"}\n'])
def test_a_worker_without_a_readable_config_exits_2_naming_it(given: str) -> None:
    """Exit 2 is the supervisor's "bad configuration, do not restart"; a traceback and exit 1 was restarted."""
    proc = subprocess.run([sys.executable, "-m", "gpuprov.images.worker"], input=given, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "no worker configuration on stdin" in proc.stdout and "gpuprov images run" in proc.stdout


def test_lines_that_only_look_like_events_neither_stop_the_reading_nor_the_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's stdout also carries what its model prints (TorchScript's ``print`` writes there): a number, a list
    or ``null`` is JSON but no event, and an event whose counts are not numbers is no count. Before, such a line
    ended the thread reading the worker, so the run counted nothing more and a full pipe stopped the worker."""
    worker = (
        "import json, sys\n"
        "sys.stdin.readline()\n"
        "for line in ['42', 'null', '[1, 2]', '\"x\"', 'not json',\n"
        "             json.dumps({'event': 'start', 'done': 'x', 'failed': None, 'batch': True}),\n"
        "             json.dumps({'event': 'progress', 'done': 8, 'failed': 1, 'batch': 16, 'read_s': 0.25,\n"
        "                         'decode_s': float('nan'), 'task_s': -1, 'wait_s': True, 'claim_s': 'y'}),\n"
        "             json.dumps({'event': 'exit', 'done': 8, 'failed': 1})]:\n"
        "    print(line, flush=True)\n"
    )
    _stand_in_worker(monkeypatch, worker)
    seen: list[tuple[object, int, int, int]] = []

    def on_event(st: SlotState, event: dict[str, object]) -> None:
        seen.append((event["event"], st.done, st.failed, st.batch))

    config = WorkerConfig(f"sqlite:///{tmp_path / 'q.db'}", str(tmp_path), task="stats")
    (state,) = supervisor.supervise(config, [Slot("cpu0")], on_event)
    assert seen == [("start", 0, 0, 0), ("progress", 8, 1, 16), ("exit", 8, 1, 16)]
    assert state.first_batch == {"read_s": 0.25}  # NaN, negative, a bool and a string are no seconds


def test_all_exited_is_told_once_every_worker_committed_while_their_processes_still_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run writes its manifest when every worker has sent ``exit`` (its results committed), not after the
    processes' teardown (a CUDA context's, about a second). A worker that dies before its ``exit`` event is
    restarted and counts only once its restart has sent one."""
    worker = (
        "import json, pathlib, sys, time\n"
        "slot = json.loads(sys.stdin.readline())['slot']['name']\n"
        f"crashed = pathlib.Path({str(tmp_path / 'crashed')!r})\n"
        "if slot == 'cpu1' and not crashed.exists():\n"
        "    crashed.touch()\n"
        "    sys.exit(1)\n"
        "print(json.dumps({'event': 'exit', 'done': 0, 'failed': 0}), flush=True)\n"
        "time.sleep(1.5)\n"
    )
    _stand_in_worker(monkeypatch, worker)
    told: list[list[bool]] = []
    states: list[SlotState] = []

    def on_event(st: SlotState, event: dict[str, object]) -> None:
        if st not in states:
            states.append(st)

    def on_all_exited() -> None:
        told.append([st.proc is not None and st.proc.poll() is None for st in states])

    config = WorkerConfig(f"sqlite:///{tmp_path / 'q.db'}", str(tmp_path), task="stats")
    ended = supervisor.supervise(config, [Slot("cpu0"), Slot("cpu1")], on_event, on_all_exited=on_all_exited)
    assert [st.restarts for st in ended] == [0, 1]
    assert told == [[True, True]]  # once, with both processes still running


def test_a_restarted_workers_record_is_its_last_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that sent results and died, then was restarted: its spawn, start-up marks and first batch in the
    record are the restart's, not a mix of the two processes; the images both did count."""
    worker = (
        "import json, pathlib, sys, time\n"
        "sys.stdin.readline()\n"
        f"crashed = pathlib.Path({str(tmp_path / 'crashed')!r})\n"
        "first = not crashed.exists()\n"
        "now = time.monotonic()\n"
        "print(json.dumps({'event': 'start', 'startup': {'process': now, 'queue': now + 0.01}}), flush=True)\n"
        "print(json.dumps({'event': 'progress', 'done': 8, 'read_s': 1.0 if first else 2.0}), flush=True)\n"
        "if first:\n"
        "    crashed.touch()\n"
        "    sys.exit(1)\n"
        "print(json.dumps({'event': 'exit', 'done': 8, 'failed': 0}), flush=True)\n"
    )
    _stand_in_worker(monkeypatch, worker)
    starts: list[float] = []

    def on_event(st: SlotState, event: dict[str, object]) -> None:
        if event["event"] == "start":
            assert st.spawned is not None
            starts.append(st.spawned)

    config = WorkerConfig(f"sqlite:///{tmp_path / 'q.db'}", str(tmp_path), task="stats")
    (state,) = supervisor.supervise(config, [Slot("cpu0")], on_event)
    assert state.restarts == 1 and state.total_done == 16 and len(starts) == 2
    assert state.spawned == starts[1]
    assert state.first_batch == {"read_s": 2.0} and state.first_done == 16
    assert state.first_result is not None and state.first_result > starts[1]
    assert state.startup["process"] > starts[1]


def test_a_failing_event_handler_leaves_the_worker_read_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The run's handler of a worker's events (progress line, metrics) raising: the thread reading that worker logs
    it once and keeps reading. Before, the thread ended, the worker's stdout filled (64 KiB) and the worker stopped
    for good in its next write, so the run never ended."""
    _stand_in_worker(monkeypatch, _progress_worker(2000, pad=30))  # about 200 KiB, past a pipe's 64 KiB
    calls: list[str] = []

    def on_event(st: SlotState, event: dict[str, object]) -> None:
        calls.append(str(event["event"]))
        raise BrokenPipeError(32, "Broken pipe")  # the progress line's terminal went away

    config = WorkerConfig(f"sqlite:///{tmp_path / 'q.db'}", str(tmp_path), task="stats")
    ended: list[SlotState] = []
    run = threading.Thread(target=lambda: ended.extend(supervisor.supervise(config, [Slot("cpu0")], on_event)),
                           daemon=True)
    run.start()
    run.join(60)
    assert not run.is_alive(), "the run did not end: the worker's output was left unread"
    (state,) = ended
    assert state.finished and state.exited and state.done == 2000
    assert len(calls) == 2001  # every event still reached the handler
    failures = [r for r in caplog.records if "handling the worker's events failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None


def test_each_handler_fails_apart_and_each_kind_of_failure_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The event handler failing on a worker's last event still lets the run learn that every worker exited (it
    writes its manifest then), and a second, different failure is logged too, not hidden behind the first."""
    _stand_in_worker(monkeypatch, _progress_worker(1))
    told: list[int] = []

    def on_event(st: SlotState, event: dict[str, object]) -> None:
        if event["event"] == "progress":
            raise BrokenPipeError(32, "Broken pipe")
        raise KeyError("a metric that is not there")

    config = WorkerConfig(f"sqlite:///{tmp_path / 'q.db'}", str(tmp_path), task="stats")
    supervisor.supervise(config, [Slot("cpu0")], on_event, on_all_exited=lambda: told.append(1))
    assert told == [1]
    logged = [type(r.exc_info[1]).__name__ for r in caplog.records if r.exc_info and r.exc_info[1]]
    assert logged == ["BrokenPipeError", "KeyError"]
