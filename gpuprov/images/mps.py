"""CUDA MPS for one run's worker processes: a private MPS control daemon that lives as long as the run.

Several worker processes share each GPU (:mod:`gpuprov.images.sizing`). Without MPS each has its own CUDA context
and the GPU time-slices between them: one context's kernels run at a time. Under MPS (Multi-Process Service,
NVIDIA's ``nvidia-cuda-mps-control``) the processes' kernels share one server context and run concurrently, so
one worker's decode kernels fill the SMs another's ResNet-50 leaves idle. On 1 x H100 with 8 workers it raised
the steady rate by about 40 % (docs/benchmarks.md, "1 x NVIDIA H100: MPS, and nvImageCodec beside the model").

The daemon is the run's own: its pipe and log folders are a fresh temporary folder, and only the run's workers
get ``CUDA_MPS_PIPE_DIRECTORY``/``CUDA_MPS_LOG_DIRECTORY`` pointing there, so no other process on the host is
moved under MPS and a host-wide MPS daemon is left alone. It runs in the foreground (``-f``) as a child of the
run, sees only the run's GPUs (``CUDA_VISIBLE_DEVICES`` = their UUIDs), is asked to ``quit`` when the run ends,
and gets SIGTERM from the kernel if the run is killed (``PR_SET_PDEATHSIG``).

Public API::

    MPS_MODES = ("auto", "on", "off")
    MPS_CONTROL = "nvidia-cuda-mps-control"
    mps_choice(mode, gpu_uuids, procs_per_gpu, environ) -> MpsChoice     # whether a run starts its daemon, why
    run_mps(choice) -> context manager yielding the workers' extra environment ({} without MPS)

Source of the daemon's interface: NVIDIA's "Multi-Process Service" guide (the ``-f`` foreground mode, the
``quit`` command on the control's stdin, the two environment variables and the ``control`` pipe they name).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.images.parent_death import sigterm_on_parent_death

log = logging.getLogger(__name__)

MPS_MODES = ("auto", "on", "off")
"""``--mps`` choices: ``auto`` (a daemon where it helps and can run), ``on`` (a daemon, or exit), ``off``."""
MPS_CONTROL = "nvidia-cuda-mps-control"
"""The MPS control daemon's command (NVIDIA driver utilities)."""
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
HOST_PIPE = Path("/tmp/nvidia-mps")
"""Where a host-wide MPS daemon started without ``CUDA_MPS_PIPE_DIRECTORY`` keeps its ``control`` pipe."""
START_TIMEOUT_S = 10.0
"""Seconds the daemon has to create its ``control`` pipe."""
STOP_TIMEOUT_S = 10.0
"""Seconds the daemon has to exit after ``quit`` before it is terminated."""


@dataclass(frozen=True)
class MpsChoice:
    """Whether a run starts its own MPS daemon (``use``), the ``--mps`` ``mode`` it came from, the daemon's
    command (``control``, a path; None where not found), when not used why (``reason``), and the run's GPUs
    (``gpu_uuids``, the daemon's ``CUDA_VISIBLE_DEVICES``)."""

    mode: str
    use: bool
    control: str | None
    reason: str
    gpu_uuids: tuple[str, ...] = ()

    def describe(self) -> str:
        """``on`` or ``off (<reason>)``, as the run's settings line shows it."""
        return "on" if self.use else f"off ({self.reason})"


def mps_choice(mode: str, gpu_uuids: Sequence[str], procs_per_gpu: int,
               environ: Mapping[str, str] | None = None) -> MpsChoice:  # fmt: skip
    """Whether a run with ``procs_per_gpu`` workers on each GPU of ``gpu_uuids`` starts its MPS daemon.

    ``off``: never. ``auto``: where there is a GPU, more than one worker per GPU, ``nvidia-cuda-mps-control`` on
    ``PATH``, and no MPS the admin set up already (``CUDA_MPS_PIPE_DIRECTORY`` in ``environ``, or a host-wide
    daemon's pipe in :data:`HOST_PIPE`: the workers use that one). ``on``: wherever there is a GPU and the
    command. Raises :class:`ConfigError` (exit 2) for ``on`` without the command, or a ``mode`` not in
    :data:`MPS_MODES`."""
    env = os.environ if environ is None else environ
    if mode not in MPS_MODES:
        raise ConfigError(f"--mps {mode!r}: choose one of {', '.join(MPS_MODES)}")
    control = shutil.which(MPS_CONTROL, path=env.get("PATH"))
    if mode == "off":
        return MpsChoice(mode, False, control, "--mps off")
    if not gpu_uuids:
        return MpsChoice(mode, False, control, "no GPU")
    if control is None:
        if mode == "on":
            raise ConfigError(f"--mps on: {MPS_CONTROL} is not on PATH (it comes with the NVIDIA driver's "
                              "utilities); install them or use --mps auto")  # fmt: skip
        return MpsChoice(mode, False, None, f"no {MPS_CONTROL}")
    if mode == "auto":
        if procs_per_gpu < 2:
            return MpsChoice(mode, False, control, "one worker per GPU")
        if env.get(PIPE_ENV):
            return MpsChoice(mode, False, control, f"{PIPE_ENV} is set: the workers use that MPS")
        if (HOST_PIPE / "control").exists():
            return MpsChoice(mode, False, control, f"a host MPS daemon ({HOST_PIPE}) serves the workers")
    return MpsChoice(mode, True, control, "", tuple(gpu_uuids))


@contextlib.contextmanager
def run_mps(choice: MpsChoice) -> Iterator[dict[str, str]]:
    """With ``choice.use``: start a private MPS control daemon for the GPUs ``choice.gpu_uuids`` (see the module
    docstring), yield the environment the workers need to use it (``CUDA_MPS_PIPE_DIRECTORY`` and
    ``CUDA_MPS_LOG_DIRECTORY``), and stop it and remove its folder on the way out. Without: yield ``{}``.

    A daemon that exits or makes no ``control`` pipe within :data:`START_TIMEOUT_S` is stopped there and then; with
    ``--mps auto`` the run goes on without MPS (one warning line, with the daemon's log); with ``--mps on`` raises
    :class:`EnvironmentMissing` (exit 4)."""
    if not choice.use or choice.control is None:
        yield {}
        return
    folder = Path(tempfile.mkdtemp(prefix="gpuprov-mps-"))
    env = {PIPE_ENV: str(folder / "pipe"), LOG_ENV: str(folder / "log")}
    for sub in env.values():
        Path(sub).mkdir(mode=0o700)
    daemon = None
    die_with_run = sigterm_on_parent_death()  # looked up here; the child only makes the call
    try:
        with (folder / "daemon.out").open("wb") as out:
            daemon = subprocess.Popen(
                [choice.control, "-f"],
                env={**os.environ, **env, "CUDA_VISIBLE_DEVICES": ",".join(choice.gpu_uuids)},
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=die_with_run,  # noqa: PLW1509 - one C call (gpuprov.images.parent_death)
            )  # fmt: skip
        problem = _wait_ready(daemon, folder / "pipe" / "control")
        if problem is not None:
            detail = f"{MPS_CONTROL} {problem}: {_tail(folder)}"
            _stop(choice.control, daemon, env)  # now: one that is still starting must not outlive the start
            daemon = None
            if choice.mode == "on":
                raise EnvironmentMissing(f"--mps on: {detail}; use --mps auto or off to run without MPS")
            log.warning("MPS not used: %s", detail)
            yield {}
        else:
            yield env
    finally:
        if daemon is not None:
            _stop(choice.control, daemon, env)
        shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(daemon: subprocess.Popen[bytes], pipe: Path) -> str | None:
    """None once the daemon made its ``pipe``; else what went wrong (it exited, or the timeout)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not pipe.exists():
        if daemon.poll() is not None:
            return f"exited with {daemon.returncode}"
        if time.monotonic() > deadline:
            return f"made no control pipe within {START_TIMEOUT_S:.0f} s"
        time.sleep(0.02)
    return None


def _tail(folder: Path) -> str:
    """The last line the daemon wrote, or of its control log; ``no output`` when neither has one."""
    for path in (folder / "daemon.out", folder / "log" / "control.log"):
        with contextlib.suppress(OSError):
            lines = path.read_text(errors="replace").strip().splitlines()
            if lines:
                return lines[-1]
    return "no output"


def _stop(control: str, daemon: subprocess.Popen[bytes], env: Mapping[str, str]) -> None:
    """Ask the daemon to ``quit`` (it stops its server first) where it made its ``control`` pipe, and wait
    :data:`STOP_TIMEOUT_S` for it; terminate one without a pipe (still starting: ``quit`` cannot reach it) or
    still there, then kill it if it is still there :data:`STOP_TIMEOUT_S` later."""
    if daemon.poll() is None and (Path(env[PIPE_ENV]) / "control").exists():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([control], input=b"quit\n", env={**os.environ, **env}, capture_output=True,
                           timeout=STOP_TIMEOUT_S, check=False)  # fmt: skip
        try:
            daemon.wait(timeout=STOP_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            log.warning("%s did not quit within %.0f s: terminated", MPS_CONTROL, STOP_TIMEOUT_S)
    daemon.terminate()
    try:
        daemon.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
