"""A run's own MPS daemon: when it is started, what its workers are given, and that it ends with the run.

The daemon is a stand-in ``nvidia-cuda-mps-control`` on ``PATH``: in the foreground (``-f``) it makes its
``control`` file in ``$CUDA_MPS_PIPE_DIRECTORY``, records its pid and the ``CUDA_VISIBLE_DEVICES`` it was given,
and exits once a client call (no argument, the command on stdin) writes ``quit`` there, as the real one does.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.images import mps
from gpuprov.images.mps import MpsChoice, mps_choice, run_mps
from gpuprov.images.slots import Slot
from gpuprov.images.supervisor import worker_env

UUIDS = ["GPU-0a1b2c3d-0000-1111-2222-333344445555"]

DAEMON = textwrap.dedent("""\
    #!{python}
    import os, pathlib, sys, time
    pipe = pathlib.Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"])
    if sys.argv[1:] == ["-f"]:
        {start}
        (pipe / "daemon.json").write_text(__import__("json").dumps(
            {{"pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}}))
        (pipe / "control").write_text("")
        while not (pipe / "quit").exists() or {ignore_quit}:
            time.sleep(0.02)
    else:
        (pipe / sys.stdin.read().strip()).write_text("")
""")


def _control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str = "pass",
             ignore_quit: bool = False) -> Path:  # fmt: skip
    """A stand-in ``nvidia-cuda-mps-control`` first on ``PATH``; returns its folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / mps.MPS_CONTROL
    script.write_text(DAEMON.format(python=sys.executable, start=start, ignore_quit=ignore_quit))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(mps.PIPE_ENV, raising=False)
    monkeypatch.setattr(mps, "HOST_PIPE", tmp_path / "no-host-mps")
    return bin_dir


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) is not running
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def test_auto_starts_a_daemon_only_where_several_workers_share_a_gpu(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _control(tmp_path, monkeypatch)
    chosen = mps_choice("auto", UUIDS, 8)
    assert chosen.use and chosen.control == str(bin_dir / mps.MPS_CONTROL) and chosen.gpu_uuids == tuple(UUIDS)
    assert chosen.describe() == "on"
    assert mps_choice("auto", UUIDS, 1).describe() == "off (one worker per GPU)"
    assert mps_choice("auto", [], 8).describe() == "off (no GPU)"
    assert mps_choice("off", UUIDS, 8).describe() == "off (--mps off)"
    assert mps_choice("on", UUIDS, 1).use  # on: even one worker per GPU
    # the admin's own MPS: the workers already use it
    own = mps_choice("auto", UUIDS, 8, {**os.environ, mps.PIPE_ENV: "/var/run/mps"})
    assert not own.use and mps.PIPE_ENV in own.reason
    (tmp_path / "no-host-mps").mkdir()
    (tmp_path / "no-host-mps" / "control").write_text("")
    assert not mps_choice("auto", UUIDS, 8).use
    assert mps_choice("on", UUIDS, 8).use


def test_without_the_command_auto_runs_without_mps_and_on_is_a_usage_error(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert mps_choice("auto", UUIDS, 8).describe() == f"off (no {mps.MPS_CONTROL})"
    with pytest.raises(ConfigError, match=r"--mps on: nvidia-cuda-mps-control is not on PATH.*--mps auto"):
        mps_choice("on", UUIDS, 8)
    with pytest.raises(ConfigError, match="--mps 'always'"):
        mps_choice("always", UUIDS, 8)


def test_the_daemon_serves_the_runs_gpus_and_quits_with_the_run(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _control(tmp_path, monkeypatch)
    with run_mps(mps_choice("auto", UUIDS, 8)) as env:
        pipe = Path(env[mps.PIPE_ENV])
        folder = pipe.parent
        assert Path(env[mps.LOG_ENV]).is_dir() and (pipe / "control").exists()
        daemon = json.loads((pipe / "daemon.json").read_text())
        assert daemon["visible"] == ",".join(UUIDS)
        assert _alive(daemon["pid"])
        # GPU workers are pointed at it, CPU workers are not
        assert worker_env(Slot("gpu0", UUIDS[0]), env)[mps.PIPE_ENV] == str(pipe)
        assert mps.PIPE_ENV not in worker_env(Slot("cpu0"), env)
    assert not _alive(daemon["pid"])
    assert not folder.exists()


def test_no_daemon_when_not_chosen() -> None:
    with run_mps(MpsChoice("off", False, None, "--mps off")) as env:
        assert env == {}


def test_a_daemon_that_does_not_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    _control(tmp_path, monkeypatch, start="print('MPS: cannot open the GPU'); sys.exit(3)")
    with caplog.at_level(logging.WARNING), run_mps(mps_choice("auto", UUIDS, 8)) as env:
        assert env == {}  # auto: the run goes on without MPS
    assert "MPS not used: nvidia-cuda-mps-control exited with 3: MPS: cannot open the GPU" in caplog.text
    refused = r"--mps on: .* exited with 3: MPS: cannot open the GPU.*--mps auto"
    with pytest.raises(EnvironmentMissing, match=refused), run_mps(mps_choice("on", UUIDS, 8)):
        pytest.fail("the run went on without the MPS it was told to use")


def test_a_daemon_that_does_not_start_in_time_is_stopped_before_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    # it never makes its control pipe, so `quit` cannot reach it: it is terminated, not left to run beside the run
    _control(tmp_path, monkeypatch, start="(pipe / 'daemon.json').write_text(str(os.getpid())); time.sleep(60)")
    monkeypatch.setattr(mps, "START_TIMEOUT_S", 0.3)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with caplog.at_level(logging.WARNING), run_mps(mps_choice("auto", UUIDS, 8)) as env:
        assert env == {}
        (pid_file,) = tmp_path.glob("gpuprov-mps-*/pipe/daemon.json")
        assert not _alive(int(pid_file.read_text()))
    assert "made no control pipe within 0 s" in caplog.text
    assert not list(tmp_path.glob("gpuprov-mps-*"))


def test_sigterm_while_the_daemon_starts_stops_it_and_exits_143(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _control(tmp_path, monkeypatch, start="(pipe / 'daemon.json').write_text(str(os.getpid())); time.sleep(60)")
    run = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""\
            from pathlib import Path
            from gpuprov.cli.images import _exit_on_sigterm
            from gpuprov.images import mps
            mps.HOST_PIPE = Path({str(tmp_path / "no-host-mps")!r})
            _exit_on_sigterm()
            with mps.run_mps(mps.mps_choice("auto", {UUIDS!r}, 8)):
                pass
        """)],
        env={**os.environ, "PYTHONPATH": str(Path.cwd()), "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    pid = ""
    while not pid:
        assert run.poll() is None
        pid = "".join(f.read_text() for f in tmp_path.glob("gpuprov-mps-*/pipe/daemon.json"))
        time.sleep(0.02)
    run.send_signal(signal.SIGTERM)
    # within the start timeout: the daemon, which has no control pipe to read `quit` from, is terminated
    assert run.wait(timeout=mps.STOP_TIMEOUT_S) == 143
    assert not _alive(int(pid))
    assert not list(tmp_path.glob("gpuprov-mps-*"))


def test_a_daemon_that_ignores_quit_is_terminated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _control(tmp_path, monkeypatch, ignore_quit=True)
    monkeypatch.setattr(mps, "STOP_TIMEOUT_S", 0.5)
    with run_mps(mps_choice("auto", UUIDS, 8)) as env:
        pid = json.loads((Path(env[mps.PIPE_ENV]) / "daemon.json").read_text())["pid"]
        assert (Path(env[mps.PIPE_ENV]) / "control").exists()
    assert not _alive(pid)


def test_the_daemon_dies_with_a_killed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _control(tmp_path, monkeypatch)
    run = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""\
            import json, sys, time
            from pathlib import Path
            from gpuprov.images import mps
            mps.HOST_PIPE = Path({str(tmp_path / "no-host-mps")!r})
            with mps.run_mps(mps.mps_choice("auto", {UUIDS!r}, 8)) as env:
                print(json.loads((Path(env[mps.PIPE_ENV]) / "daemon.json").read_text())["pid"], flush=True)
                time.sleep(60)
        """)],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path.cwd()), "TMPDIR": str(tmp_path)},  # a killed run leaves its folder
    )  # fmt: skip
    assert run.stdout is not None
    pid = int(run.stdout.readline())
    assert _alive(pid)
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the MPS daemon outlived the run that was killed"
