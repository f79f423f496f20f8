"""``gpuprov images``: submit image sets to a durable queue, run one worker per GPU over it, show status.

``submit SRC... --queue URL`` takes files, folders (searched recursively), globs and manifests
(``.txt``: one path a line; ``.jsonl``: ``{"path": ...}`` a line). ``run`` starts the workers
(see :mod:`gpuprov.images.worker`) with live progress and writes ``OUT/manifest.jsonl``; with
``--follow`` (how the ``gpuprov-worker@`` systemd units of the image_workers role run it) the workers wait
for new images instead of exiting, and the manifest is rewritten each time the queue drains. Every
``--queue`` may come from the environment variable ``GPUPROV_IMAGES_QUEUE`` instead, so that a URL with a
Redis password stays out of the process list (the role's 0600 environment file sets it).
Exit codes of ``run``: 0 done (failed images - corrupt, unreadable - are listed in ``OUT/failures.jsonl``
and counted, not fatal); 1 done but tasks are dead (out of attempts: a worker kept crashing or timing
out on them; ``retry --dead`` queues them again); 2 bad usage; 4 no torch, no queue store, a queue
that lost tasks, or a worker on the wrong GPU or without a dependency. ``retry`` puts dead or failed
tasks back (all, or the ones named by path or key). ``warm`` builds a model's compiled step into this machine's
cache before the workers start (:mod:`gpuprov.cli.images_warm`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gpuprov.cli.images_options import mps_option, run_settings, settings_line, sizing_options
from gpuprov.cli.images_report import QUEUE_ENVVAR, check_json_path, finish_run, progress_log, worker_ready_line
from gpuprov.cli.images_warm import warm_cmd
from gpuprov.exceptions import ConfigError
from gpuprov.images.compiled import check_compile_option, may_compile
from gpuprov.images.forkserver import KEEP_WARM_S, serving, start_server
from gpuprov.images.forkserver_socket import run_socket
from gpuprov.images.formats import DEFAULT_MAX_PIXELS
from gpuprov.images.mps import MpsChoice, mps_choice, run_mps
from gpuprov.images.queue.base import MAX_LEASE_S
from gpuprov.images.sources import expand_sources

KEEP_WARM_ENV = "GPUPROV_IMAGES_KEEP_WARM"
#: the longest --keep-warm taken, seconds: a week
MAX_KEEP_WARM_S = 7 * 86400
#: the largest --batch taken: far above what a GPU's memory holds of any model's inputs, and small enough for every
#: queue store's integers (a batch of 10**20 overflowed SQLite's INTEGER in each worker)
MAX_BATCH = 65536


def _check_run_options(task: str | None, model: Path | None, batch: str, lease_s: float,
                       json_path: Path | None, compile_mode: str, keep_warm_s: float = 0.0) -> None:  # fmt: skip
    """Raise :class:`ConfigError` (exit 2) unless exactly one of task/model is given (the model a file),
    batch is auto or N > 0, the lease and ``--keep-warm`` numbers of seconds (click's range lets NaN through),
    ``--json``, if given, a file that can be written, and ``--compile`` one the model can take."""
    check_json_path(json_path)
    check_compile_option(compile_mode, model)
    if not math.isfinite(lease_s):
        raise ConfigError(f"--lease {lease_s}: expected seconds from 1 to {MAX_LEASE_S:g}")
    if not math.isfinite(keep_warm_s):
        raise ConfigError(f"--keep-warm {keep_warm_s}: expected seconds from 0 to {MAX_KEEP_WARM_S:g}")
    if (task is None) == (model is None):
        raise ConfigError("give exactly one of --task NAME or --model PATH")
    if model is not None and not model.is_file():
        raise ConfigError(f"--model {model}: no such file; give a TorchScript (.pt) or ONNX (.onnx) file")
    if batch != "auto" and not (re.fullmatch(r"[0-9]{1,6}", batch) and 0 < int(batch) <= MAX_BATCH):
        raise ConfigError(f"--batch {batch}: expected auto or a number from 1 to {MAX_BATCH}")


def _make_out(out: Path) -> None:
    """Create the ``--out`` folder and prove it writable (the manifest is written there at the end of the run), and
    start importing what writes the manifest's Parquet copy (:func:`~gpuprov.images.manifest.preload_parquet`);
    :class:`ConfigError` (exit 2) when it cannot be (empty, read-only, no permission, a file in the way)."""
    from gpuprov.images.manifest import preload_parquet

    if not str(out).strip() or out == Path():
        raise ConfigError("--out is empty; give the folder the manifest and results go to")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"--out {out}: cannot create the folder ({exc.strerror}); give a folder this user can write"
        ) from exc
    try:
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--out {out}: cannot write there ({exc.strerror}); give a folder this user can write"
        ) from exc
    preload_parquet()


def _installed(module: str) -> bool:
    """Whether ``module`` (dotted) can be imported, without importing it; a missing parent package is False."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _settings(slots: list[Any], procs_per_gpu: int | None, threads: int | None, cpu_workers: int, batch: str,
              compile_mode: str, jpeg: str, follow: bool) -> dict[str, Any]:  # fmt: skip
    """The run's settings (:func:`run_settings`, and ``cudnn_autotune`` as the workers will decide it:
    :func:`~gpuprov.images.tasks.cudnn_autotune`, false where no slot is a GPU). Raises :class:`ConfigError`
    (exit 2) for ``--jpeg nvimgcodec`` on GPUs without nvImageCodec installed, or a bad
    ``GPUPROV_IMAGES_CUDNN_AUTOTUNE``: checked here, not in each worker, where it would surface as "worker exited
    with 2"."""
    from gpuprov.images.tasks import cudnn_autotune

    if jpeg == "nvimgcodec" and any(s.uuid for s in slots) and not _installed("nvidia.nvimgcodec"):
        raise ConfigError(
            "--jpeg nvimgcodec: nvImageCodec is not installed (pip install nvidia-nvimgcodec-cu13); "
            "use --jpeg auto to fall back to torchvision's nvJPEG"
        )
    return {**run_settings(slots, procs_per_gpu, threads, cpu_workers, batch, compile_mode),
            "cudnn_autotune": cudnn_autotune(follow) and any(s.uuid for s in slots)}  # a CPU has no cuDNN


def _supervise(mps: MpsChoice, settings: dict[str, Any], log: Callable[[str], None],
               run: Callable[[dict[str, str], Path | None], list[Any]], ending: dict[str, float],
               fork: Path | None, keep_warm_s: float) -> list[Any]:  # fmt: skip
    """``run(env, fork)`` (the supervisor) under the run's MPS daemon (:func:`~gpuprov.images.mps.run_mps`; ``env``
    names it to the GPU workers), once the settings line, with MPS's state, is logged and put in ``settings``;
    ``fork``: the fork server's socket (:func:`~gpuprov.images.forkserver_socket.run_socket`) or None. Marks in
    ``ending`` (``time.monotonic()``) when the workers had all exited and when the daemon had stopped. Then, with
    ``fork``, leaves a fork server there for the next run unless one serves already."""
    with run_mps(mps) as env:
        settings["mps"] = mps.describe() if env or not mps.use else "off (its daemon did not start)"
        log(settings_line(settings))
        states = run(env, fork)
        ending["workers_exited"] = time.monotonic()
    ending["mps_stopped"] = time.monotonic()
    if fork is not None and not serving(fork):
        start_server(fork, keep_warm_s)
        log(f"left a fork server with torch imported for the next run's workers ({fork}); it ends after "
            f"{keep_warm_s:g} s without work (--keep-warm 0: none)")  # fmt: skip
    return states


def _exit_on_sigterm() -> None:
    """SIGTERM (``kill``, ``systemctl stop``) raises SystemExit(143), so ``supervise`` stops the workers on
    its way out instead of leaving them to run on their own."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _open_for_run(url: str, follow: bool, label: str, out: Path) -> Any:
    """The queue a run works on. A one-off run on a mistyped path exits 2 and creates no empty queue
    (a service, ``follow``, creates it); on a missing queue that ``out``'s manifest was made from, it
    exits 4 (:class:`QueueLost`). A run whose task (``label``) differs from the one that made the
    queue's results exits 2 (:class:`ConfigError`): results are kept per image, so another task would get
    the first one's rows back unchanged."""
    from gpuprov.images.manifest import manifest_rows
    from gpuprov.images.queue import QueueLost, QueueMissing, open_queue

    try:
        queue = open_queue(url, create=follow)
    except QueueMissing as exc:
        had = manifest_rows(out)
        if had:
            raise QueueLost(
                f"{exc.message.split(';')[0]}, but {out / 'manifest.jsonl'} has {had} rows made from it: the queue "
                "was lost (a Redis server restarted without persistence?); the manifest is left as it was"
            ) from exc
        raise
    if warning := queue.durability_warning():
        click.echo(f"gpuprov: warning: {warning}", err=True)
    rows = queue.results()
    try:
        first = next(iter(rows), None)
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
    made_by = first[1].get("task") if first else None
    if made_by is not None and made_by != label:
        queue.close()
        raise ConfigError(
            f"--queue {url}: its results were made by task {made_by!r}, this run asks for {label!r}; a queue keeps "
            "one result per image, so submit the images to a new queue for another task"
        )
    return queue


@click.group("images")
def command() -> None:
    """Process large image sets on every GPU of this host through a durable queue."""


@command.command("submit")
@click.argument("sources", nargs=-1, required=True)
@click.option("--queue", "url", required=True, envvar=QUEUE_ENVVAR, show_envvar=True,
              help="Queue URL: sqlite:///abs/q.db or redis://host/0.")  # fmt: skip
def submit_cmd(sources: tuple[str, ...], url: str) -> None:
    """Queue images from files, folders, globs or manifests (idempotent per path)."""
    from gpuprov.images.queue import open_queue

    payloads = [{"path": str(p)} for p in expand_sources(sources)]  # bad sources: exit 2 before a queue exists
    queue = open_queue(url)
    try:
        added = queue.submit(payloads)
        click.echo(f"{added} new of {len(payloads)} images queued; {queue.stats().open} open")
    finally:
        queue.close()


@command.command("run")
@click.option("--queue", "url", required=True, envvar=QUEUE_ENVVAR, show_envvar=True, help="Queue URL.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder.")
@click.option(
    "--task", "task", default=None, type=click.Choice(["stats", "thumbnail"]), help="Built-in task: stats or thumbnail."
)
@click.option("--model", "model", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="TorchScript (.pt), exported program (.pt2; see --compile) or ONNX (.onnx) classifier.")  # fmt: skip
@click.option("--gpus", default="all", show_default=True, help="all, cpu, or indices/UUIDs like 0,1.")
@click.option(
    "--cpu-workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Worker processes when running on CPU.",
)
@click.option("--batch", default="auto", show_default=True, help="auto or a number.")
@click.option(
    "--size", type=click.IntRange(min=1), default=None, help="Working size (model input, thumbnail long side)."
)
@click.option(
    "--lease",
    "lease_s",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=1, max=MAX_LEASE_S),
    help="Lease in seconds, 1 to 86400 (renewed while working).",
)
@sizing_options
@mps_option
@click.option(
    "--jpeg",
    default="torchvision",
    show_default=True,
    type=click.Choice(["torchvision", "nvimgcodec", "auto"]),
    help="Baseline JPEG decoder on a GPU; nvimgcodec needs nvidia-nvimgcodec-cu13.",
)
@click.option(
    "--metrics-port", type=click.IntRange(1, 65535), default=None, help="Serve Prometheus metrics on this port."
)
@click.option("--max-pixels", "max_pixels", default=DEFAULT_MAX_PIXELS, show_default=True,
              type=click.IntRange(min=1, max=2**62),
              help="Refuse (fail, undecoded) an image declaring more pixels: decompression bombs. Pillow's limit.")
@click.option("--quiet", is_flag=True, help="No live progress.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="At the end, write the run's report as JSON here: counts, rates, the first and last result, and "
                   "each worker's start-up seconds per phase.")  # fmt: skip
@click.option("--follow", is_flag=True,
              help="Keep running when the queue is drained and wait for new images (a service); the manifest is "
                   "rewritten each time the queue drains.")  # fmt: skip
@click.option("--keep-warm", "keep_warm_s", default=KEEP_WARM_S, show_default=True, envvar=KEEP_WARM_ENV,
              show_envvar=True, type=click.FloatRange(min=0, max=MAX_KEEP_WARM_S),
              help="Seconds a process with torch imported stays after the run, so the next run's workers start "
                   "from it without importing torch; 0: none (docs/images.md, 'Fork server').")  # fmt: skip
def run_cmd(url: str, out: Path, task: str | None, model: Path | None, gpus: str, cpu_workers: int, batch: str,
            size: int | None, lease_s: float, threads: int | None, procs_per_gpu: int | None, compile_mode: str,
            mps_mode: str, jpeg: str, metrics_port: int | None, max_pixels: int, quiet: bool,
            json_path: Path | None, follow: bool, keep_warm_s: float) -> None:  # fmt: skip
    """Run the workers (--procs-per-gpu on each GPU, or --cpu-workers) until the queue is drained (--follow: until
    stopped); write OUT/manifest.jsonl."""
    from gpuprov.images.manifest import RunManifest
    from gpuprov.images.metrics import Metrics
    from gpuprov.images.slots import resolve_slots
    from gpuprov.images.startup import run_report
    from gpuprov.images.supervisor import SlotState, supervise
    from gpuprov.images.worker import WorkerConfig, task_label

    started = time.monotonic()
    _check_run_options(task, model, batch, lease_s, json_path, compile_mode, keep_warm_s)
    _make_out(out)
    slots = resolve_slots(gpus, cpu_workers)
    settings = _settings(slots, procs_per_gpu, threads, cpu_workers, batch, compile_mode, jpeg, follow)
    mps = mps_choice(mps_mode, [s.uuid for s in slots if s.uuid], settings["procs_per_gpu"])
    base = WorkerConfig(url, str(out), task, str(model.resolve()) if model else None,
                        None if batch == "auto" else int(batch), size, lease_s, settings["threads"], follow=follow,
                        jpeg=jpeg, max_pixels=max_pixels, compile=compile_mode)  # fmt: skip
    metrics = Metrics(metrics_port)
    queue = _open_for_run(url, follow, task_label(task, str(model) if model else None), out)
    total = queue.stats().total
    log = progress_log(quiet)
    last_poll = [0.0]
    done_by_slot: dict[str, int] = {}
    ending: dict[str, float] = {}
    manifest = RunManifest(queue, out, total, ending)

    def on_event(st: SlotState, event: dict[str, Any]) -> None:
        done_by_slot[st.slot.name] = st.total_done
        if follow and event.get("event") == "progress" and (counts := manifest.drained()):
            log(f"queue drained: {counts['rows']} rows in {out / 'manifest.jsonl'}, "
                f"{counts['failed'] + counts['dead']} failed")  # fmt: skip
        metrics.worker(st.slot.name, st.total_done, st.failed, st.batch, time.time())
        if event.get("event") == "start":
            log(worker_ready_line(st, event))
        now = time.monotonic()
        if now - last_poll[0] > 2.0:
            last_poll[0] = now
            stats = queue.stats()
            metrics.queue_stats(stats)
            metrics.gpus([s.uuid for s in slots if s.uuid])
            rate = sum(done_by_slot.values()) / max(1e-9, now - started)
            log(f"done {stats.done}/{stats.total}  failed {stats.failed + stats.dead}  {rate:.1f} img/s")

    states_ref: list[SlotState] = []
    _exit_on_sigterm()
    try:
        states_ref.extend(_supervise(mps, settings, log, lambda env, fork: supervise(
            base, slots, on_event, settings["procs_per_gpu"], env=env, forkserver=fork,
            on_all_exited=None if follow else manifest.early), ending,
            run_socket(keep_warm_s, follow, may_compile(model, compile_mode)), keep_warm_s))  # fmt: skip
        counts = manifest.final()
    finally:
        manifest.close()  # an early write in a reader thread (SIGTERM, ^C) ends before the queue closes
        queue.close()
    finish_run(url, out, json_path, {**run_report(states_ref, started, counts, ending), "settings": settings})


command.add_command(warm_cmd)


@command.command("status")
@click.option("--queue", "url", required=True, envvar=QUEUE_ENVVAR, show_envvar=True, help="Queue URL.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def status_cmd(url: str, as_json: bool) -> None:
    """Print the queue's task counts per state and the first failures."""
    from gpuprov.images.queue import open_queue

    queue = open_queue(url, create=False)
    try:
        stats = queue.stats()
        failures = [f for _, f in zip(range(10), queue.failures(), strict=False)]
        warning = queue.durability_warning()
    finally:
        queue.close()
    if warning:
        click.echo(f"gpuprov: warning: {warning}", err=True)
    counts = {s: getattr(stats, s) for s in ("pending", "leased", "done", "failed", "dead")}
    if as_json:
        click.echo(json.dumps({**counts, "total": stats.total}))
        return
    width = max(len(state) for state in counts)
    for state, n in counts.items():
        click.echo(f"{state:<{width}}  {n}")
    for shard, state, reason, payload in failures:
        click.echo(f"shard {shard} ({payload.get('path') or payload.get('key')}): {state}: {reason}")


@command.command("retry")
@click.argument("keys", nargs=-1)
@click.option("--queue", "url", required=True, envvar=QUEUE_ENVVAR, show_envvar=True, help="Queue URL.")
@click.option("--dead", is_flag=True, help="Dead tasks (out of attempts).")
@click.option("--failed", is_flag=True, help="Failed tasks (the image could not be processed).")
def retry_cmd(keys: tuple[str, ...], url: str, dead: bool, failed: bool) -> None:
    """Queue dead or failed tasks again with fresh attempts: all of them, or those KEYS (image paths as
    submitted, or keys). With KEYS and neither flag, both states."""
    from gpuprov.images.queue import UnknownTask, open_queue, task_id

    states = [s for s, on in (("failed", failed), ("dead", dead)) if on] or (["failed", "dead"] if keys else [])
    if not states:
        raise ConfigError("say what to retry: --dead, --failed, or the paths or keys of the tasks")
    ids = [task_id(_task_key(k)) for k in keys] if keys else None
    queue = open_queue(url, create=False)
    try:
        moved = queue.retry(states, ids)
        click.echo(f"{moved} task(s) queued again ({' and '.join(states)}); {queue.stats().open} open")
        if ids is not None and moved < len(set(ids)):
            click.echo(f"{len(set(ids)) - moved} of the tasks named are not {' or '.join(states)} (pending, leased or "
                       "done, or in the other state); `gpuprov images status` lists the failed and dead ones", err=True)
    except UnknownTask as exc:
        unknown = [k for k, i in zip(keys, ids or [], strict=True) if i in str(exc)] or list(keys)
        raise ConfigError(
            f"--queue {url}: no task for {', '.join(unknown[:5])}; give image paths or keys as they were "
            "submitted (`gpuprov images status` lists the failures)"
        ) from None
    finally:
        queue.close()


def _task_key(key: str) -> str:
    """The submitted key for a command-line KEY: the path made absolute as ``submit`` made it (relative to the
    current folder, symbolic links resolved), whether or not the file is still there."""
    if not key.strip():
        raise ConfigError("an empty KEY names no task; give the image paths or keys to retry")
    return str(Path(key).resolve())
