"""The sizing options of ``gpuprov images run`` - ``--procs-per-gpu``, ``--threads`` (``auto`` or a number) and
``--compile`` - and the settings a run takes from them and from the machine (:func:`run_settings`), which the run
prints when it starts and writes into its ``--json`` report."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from gpuprov.exceptions import ConfigError
from gpuprov.images.compiled import COMPILE_ENV, COMPILE_MODES
from gpuprov.images.mps import MPS_MODES
from gpuprov.images.sizing import fast_defaults, machine_cpus

F = TypeVar("F", bound=Callable[..., Any])
GPUS_ON_CPUS_ENV = "GPUPROV_IMAGES_GPUS_ON_CPUS"
"""GPUs whose workers share this run's CPUs (the image_workers role's per-GPU services set it), see
:func:`gpus_on_cpus`."""
MPS_ENV = "GPUPROV_IMAGES_MPS"
"""``--mps`` from the environment (the image_workers role's services can set it)."""
#: the largest --procs-per-gpu and --threads taken: far above any useful value, below what would exhaust a host
MAX_COUNT = 256


def _auto_or_count(_ctx: click.Context, param: click.Parameter, value: str) -> int | None:
    """``auto`` -> None (the machine decides, :func:`run_settings`), ``N`` -> N from 1 to :data:`MAX_COUNT`;
    anything else is a usage error (exit 2) naming the option."""
    if value == "auto":
        return None
    if value.isdigit() and 1 <= int(value) <= MAX_COUNT:
        return int(value)
    raise click.BadParameter(f"{value!r}: expected auto or a number from 1 to {MAX_COUNT}", param=param)


def sizing_options(func: F) -> F:
    """Decorate ``images run`` with ``--procs-per-gpu``, ``--threads`` and ``--compile``."""
    decorators = [
        click.option("--procs-per-gpu", "procs_per_gpu", default="auto", show_default=True,
                     callback=_auto_or_count,
                     help="Worker processes per GPU, all pinned to it by UUID; auto: from the CPUs per GPU and "
                          "the GPU's memory (docs/images.md)."),
        click.option("--threads", default="auto", show_default=True, callback=_auto_or_count,
                     help="CPU decode threads per worker; auto: from the CPUs per GPU (docs/images.md)."),
        click.option("--compile", "compile_mode", default="auto", show_default=True, envvar=COMPILE_ENV,
                     show_envvar=True, type=click.Choice(COMPILE_MODES),
                     help="torch.compile of an exported (.pt2) model, its build cached per machine; auto: on a "
                          "GPU, off on a CPU and for TorchScript."),
    ]  # fmt: skip
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def mps_option(func: F) -> F:
    """Decorate ``images run`` with ``--mps`` (:mod:`gpuprov.images.mps`)."""
    return click.option(
        "--mps", "mps_mode", default="auto", show_default=True, envvar=MPS_ENV, show_envvar=True,
        type=click.Choice(MPS_MODES),
        help="A CUDA MPS daemon of the run's own, so a GPU's workers run their kernels concurrently; auto: with "
             "several workers per GPU where nvidia-cuda-mps-control is installed and no MPS is set up "
             "(docs/images.md).",
    )(func)  # fmt: skip


def run_settings(slots: Sequence[Any], procs_per_gpu: int | None, threads: int | None, cpu_workers: int,
                 batch: str, compile_mode: str) -> dict[str, Any]:  # fmt: skip
    """The run's settings: ``procs_per_gpu`` and ``threads`` as given or, for ``auto`` (None), from
    :func:`~gpuprov.images.sizing.fast_defaults` over this process's CPUs and the ``slots``' GPUs (the smallest
    memory among them), with ``batch`` and ``compile``, and what they were chosen from: ``{"procs_per_gpu",
    "threads", "batch", "compile", "chosen": {option: "auto" or "given"}, "cpus", "gpus", "gpus_on_cpus",
    "gpu_memory_bytes"}`` (``gpus_on_cpus``: the GPUs the CPUs are divided among, :func:`gpus_on_cpus`; 0 on a
    CPU run)."""
    gpus = [s for s in slots if s.uuid]
    memories = [s.memory_bytes for s in gpus if s.memory_bytes]
    # other runs' GPUs on the same CPUs count too: the image_workers role runs one run per GPU, each on its GPU's
    # NUMA node, and tells each how many GPU instances share that node
    sharing = max(len(gpus), gpus_on_cpus()) if gpus else 0
    rule = fast_defaults(machine_cpus(), sharing, min(memories) if memories else None, cpu_workers)
    return {
        "procs_per_gpu": rule.procs_per_gpu if procs_per_gpu is None else procs_per_gpu,
        "threads": rule.threads if threads is None else threads,
        "batch": batch,
        "compile": compile_mode,
        "chosen": {
            "procs_per_gpu": "auto" if procs_per_gpu is None else "given",
            "threads": "auto" if threads is None else "given",
        },
        "cpus": rule.cpus,
        "gpus": len(gpus),
        "gpus_on_cpus": rule.gpus,
        "gpu_memory_bytes": rule.gpu_memory_bytes,
    }


def gpus_on_cpus() -> int:
    """``$GPUPROV_IMAGES_GPUS_ON_CPUS``: GPUs whose workers share this process's CPUs, this run's included (the
    image_workers role sets it per instance); 1 when unset. Raises :class:`ConfigError` (exit 2) for a value that is
    not a whole number from 1 up."""
    value = os.environ.get(GPUS_ON_CPUS_ENV, "1")
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{GPUS_ON_CPUS_ENV}={value!r}: expected a whole number from 1 up (GPUs sharing these CPUs)")
    return int(value)


def settings_line(settings: dict[str, Any]) -> str:
    """The start-up line of :func:`run_settings`, e.g. ``settings: 8 procs/GPU (auto), 8 decode threads (auto),
    batch auto, compile auto; 16 CPUs, 1 GPU of 140.4 GiB``."""
    chosen = settings["chosen"]
    memory = settings["gpu_memory_bytes"]
    gpus = settings["gpus"]
    where = "no GPU" if not gpus else f"{gpus} GPU{'s' if gpus > 1 else ''}"
    if gpus and memory:
        where += f" of {memory / 1024**3:.1f} GiB"
    if settings["gpus_on_cpus"] > gpus:
        where += f" ({settings['gpus_on_cpus']} GPUs on these CPUs)"
    procs = f"{settings['procs_per_gpu']} procs/GPU ({chosen['procs_per_gpu']}), " if gpus else ""
    mps = f", MPS {settings['mps']}" if gpus and "mps" in settings else ""
    return (f"settings: {procs}{settings['threads']} decode threads ({chosen['threads']}), batch {settings['batch']}, "
            f"compile {settings['compile']}{mps}; {settings['cpus']} CPUs, {where}")  # fmt: skip
