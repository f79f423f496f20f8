"""What ``gpuprov images run`` prints and writes about a run: live progress lines on stderr (each worker's
start-up breakdown when it is ready), the summary at the end, and the ``--json`` report
(:func:`gpuprov.images.startup.run_report`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gpuprov.exceptions import ConfigError
from gpuprov.images.startup import WorkerState, startup_line, worker_phases
from gpuprov.redact import redact_credentials

QUEUE_ENVVAR = "GPUPROV_IMAGES_QUEUE"
EXIT_DEAD = 1


def progress_log(quiet: bool) -> Callable[[str], None]:
    """A function printing ``HH:MM:SS message`` on stderr, or nothing when ``quiet``."""
    return (lambda message: None) if quiet else (lambda m: click.echo(f"{time.strftime('%H:%M:%S')} {m}", err=True))


def worker_ready_line(state: WorkerState, event: dict[str, Any]) -> str:
    """The progress line of a worker's ``start`` event: slot, device, batch, whether its model runs compiled,
    whether the fork server started it, and its start-up seconds per phase, e.g. ``gpu0.1: worker on cuda GPU-...
    batch 1024, compile default, forked; ready in 0.9 s (process 0.0, imports 0.0, ...)`` (``compile off (a CPU
    run)``; no compile part for a built-in task, no ``forked`` for a worker started as a new interpreter)."""
    seconds = worker_phases(state)
    where = f"{event.get('device')} {event.get('uuid') or ''}".rstrip()
    choice = event.get("compile")
    compiled = ""
    if isinstance(choice, dict):
        mode = choice.get("mode")
        compiled = f", compile {mode}" if mode else f", compile off ({choice.get('reason')})"
    forked = ", forked" if state.forked else ""
    return (f"{state.slot.name}: worker on {where} batch {event.get('batch')}{compiled}{forked}; "
            f"{startup_line(seconds)}")  # fmt: skip


def check_json_path(path: Path | None) -> None:
    """Raise :class:`ConfigError` (exit 2, before any worker starts) unless ``--json`` names a file that can be
    written: not a folder, in a folder that exists and this user can write."""
    if path is None:
        return
    if path.is_dir():
        raise ConfigError(f"--json {path}: is a folder; give the path of the file to write the run's report to")
    parent = path.parent if str(path.parent) else Path()
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ConfigError(f"--json {path}: {parent} is not a folder this user can write; choose another path")
    existed = path.exists()
    try:  # the permission bits do not tell (root, /proc, a read-only mount): open it as the report will
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError(f"--json {path}: cannot write it ({exc.strerror or exc}); choose another path") from None
    if not existed:
        path.unlink(missing_ok=True)


def queue_for_display(url: str) -> str:
    """``url`` as a command line to copy may show it: ``"$GPUPROV_IMAGES_QUEUE"`` when it came from there, a
    placeholder when it carries a password in its query, else with any ``user:password@`` redacted."""
    if os.environ.get(QUEUE_ENVVAR) == url:
        return f'"${QUEUE_ENVVAR}"'
    if "password=" in url.lower():
        return "URL"
    return redact_credentials(url)


def finish_run(url: str, out: Path, json_path: Path | None, report: dict[str, Any]) -> None:
    """Write a finished run's ``report`` (:func:`gpuprov.images.startup.run_report`) to ``json_path`` if given
    and print its summary; exit :data:`EXIT_DEAD` when tasks are dead, naming the command that queues them
    again. Raises :class:`ConfigError` when the report cannot be written."""
    if json_path is not None:
        try:
            json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"--json {json_path}: cannot write the report ({exc.strerror}); choose another path"
            ) from exc
    dead = report["dead"]
    click.echo(f"{report['rows']} rows in {out / 'manifest.jsonl'}, {report['failed']} failed, {dead} dead; "
               f"{report['images']} images in {report['wall_s']:.1f} s ({report['images_per_s']:.1f} img/s); "
               f"restarts {report['restarts']}")  # fmt: skip
    if report["first_result_s"] is not None:
        steady = report["steady_images_per_s"]
        click.echo(f"first result after {report['first_result_s']:.1f} s"
                   + (f", then {steady:.1f} img/s to the last" if steady is not None else ""))  # fmt: skip
    if dead:
        click.echo(f"{dead} task(s) dead: out of attempts (see {out / 'failures.jsonl'}); once the cause is fixed, "
                   f"`gpuprov images retry --queue {queue_for_display(url)} --dead` queues them again and another "
                   "run processes them", err=True)  # fmt: skip
        raise click.exceptions.Exit(EXIT_DEAD)
