"""``gpuprov images warm``: build a model's compiled step into this machine's cache before any worker needs it.

It runs one worker's start-up (:func:`gpuprov.images.worker.prepare`: the model loaded, the batch probed with the
GPU's memory split as ``--procs-per-gpu`` processes will split it, the model compiled for that batch, one warm-up
batch) on the first GPU of ``--gpus``, in this process, without a queue, and exits. What the compile built stays in
the compile caches (:mod:`gpuprov.images.compiled`), so the workers that start later load it instead of compiling:
the image_workers role runs it at deploy time as the worker user. A compile that fails is reported (the workers
will run the model uncompiled) and is not an error: exit 0. Exit 2 for bad options, 4 without torch or the GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from gpuprov.cli.images_options import run_settings, sizing_options
from gpuprov.exceptions import ConfigError
from gpuprov.images.compiled import check_compile_option


@click.command("warm")
@click.option("--model", "model", required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="The model the workers run (an exported .pt2 compiles).")  # fmt: skip
@click.option("--gpus", default="all", show_default=True, help="all or indices/UUIDs; the first one is used.")
@click.option("--batch", default="auto", show_default=True, help="auto or a number, as the workers run.")
@click.option("--size", type=click.IntRange(min=1), default=None, help="Model input size, as the workers run.")
@click.option("--record", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the summary line here once done (the image_workers role's marker of a finished build).")
@sizing_options
def warm_cmd(model: Path, gpus: str, batch: str, size: int | None, record: Path | None, procs_per_gpu: int | None,
             threads: int | None, compile_mode: str) -> None:  # fmt: skip
    """Compile the model into this machine's cache as a worker would, so that workers start from the cache."""
    from gpuprov.images.slots import replicate, resolve_slots
    from gpuprov.images.startup import Startup, phase_seconds, startup_line
    from gpuprov.images.worker import WorkerConfig, compile_report, prepare

    check_compile_option(compile_mode, model)
    if batch != "auto" and not (batch.isdigit() and int(batch) > 0):
        raise ConfigError(f"--batch {batch}: expected auto or a number above 0")
    slots = resolve_slots(gpus)
    settings = run_settings(slots, procs_per_gpu, threads, 1, batch, compile_mode)
    slot = replicate(slots[:1], settings["procs_per_gpu"])[0]
    if slot.uuid:  # pinned as a worker is (gpuprov.images.supervisor.worker_env), before torch opens CUDA
        os.environ.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=slot.uuid)
    # follow: cuDNN autotunes (or not) as the --follow services it builds for, so they find its probe record
    cfg = WorkerConfig("", str(Path.cwd()), None, str(model.resolve()), None if batch == "auto" else int(batch),
                       size, threads=settings["threads"], slot=slot, follow=True, compile=compile_mode)  # fmt: skip
    startup = Startup()
    startup.mark("process")
    started = startup.marks["process"]
    device, task, backoff, decoder = prepare(cfg, startup)
    decoder.close()
    choice = compile_report(task) or {}
    compiled = choice.get("mode") or f"off ({choice.get('reason')})"
    seconds = phase_seconds(startup.marks, started)
    line = f"{slot.name}: {model.name} on {device} batch {backoff.batch}, compile {compiled}; {startup_line(seconds)}"
    click.echo(line)
    if record is not None:
        try:
            record.write_text(line + "\n", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--record {record}: cannot write it ({exc.strerror}); choose a writable path") from exc
