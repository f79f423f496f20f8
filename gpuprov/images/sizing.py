"""The fast configuration of ``gpuprov images run`` chosen from the machine: worker processes per GPU and decode
threads per worker (:func:`fast_defaults`), from the CPUs this process may run on and the GPUs' memory.

Public API::

    fast_defaults(cpus: int, gpus: int, gpu_memory_bytes: int | None, cpu_workers: int = 1) -> Sizing
    machine_cpus() -> int                       # len(os.sched_getaffinity(0)), os.cpu_count() elsewhere

Source of the rule: the measurements of ``gpuprov images`` on 1 x H200 with 16 CPU cores in docs/benchmarks.md
(sections "several worker processes per GPU", "frozen model, cheaper batched resize" and "fused crop+resize
kernel, queue lock, commit thread", 2026-12-01): 8 worker processes per GPU were faster in steady state than 4
in every run of the last two sections, 4 several times faster than 1, all with ``--threads 8``; more than 8
processes, and other thread counts, were not measured. 16 cores and 8 processes is 2 cores per process, hence
``procs_per_gpu = clamp(cpus_per_gpu // 2, 1, 8)`` and ``threads = clamp(cpus_per_gpu // 2, 1, 8)`` (the measured
8 at 16 cores per GPU; the decode threads serve only the images the GPU does not decode - progressive JPEG, PNG,
other formats - so they mostly wait, and a worker may have more of them than its share of the cores).

The batch is not part of the rule: ``--batch auto`` probes it in each worker from the GPU's free memory, split
between the processes this rule puts on the GPU (:func:`gpuprov.images.memory.auto_batch`); it was 1024 (the cap)
in every measured H200 run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MAX_PROCS_PER_GPU = 8
"""The most worker processes per GPU the rule picks: the most measured (docs/benchmarks.md)."""
CPUS_PER_PROC = 2
"""CPU cores per worker process: 16 cores ran 8 processes per GPU, the fastest measured (docs/benchmarks.md)."""
MAX_THREADS = 8
"""The most decode threads per worker the rule picks: the measured ``--threads 8`` (docs/benchmarks.md)."""
MAX_CPU_THREADS = 4
"""Decode threads per CPU-mode worker at most: there they compete with torch's own threads for the same cores
(the previous fixed default; not measured against others)."""
MIN_GPU_MEMORY_PER_PROC = 4 * 1024**3
"""Device memory, bytes, each worker process of a GPU is given at least: each holds its own CUDA context, model
and batch. A bound, not a measurement: it keeps a 16 GiB GPU at 4 processes or fewer."""


@dataclass(frozen=True)
class Sizing:
    """A run's worker sizing: ``procs_per_gpu`` (worker processes per GPU; 1 in CPU mode), ``threads`` (decode
    threads per worker), and what it was chosen from: ``cpus`` (CPUs this process may run on), ``gpus`` (GPUs
    the run uses), ``gpu_memory_bytes`` (the smallest of their memories; None in CPU mode or unknown)."""

    procs_per_gpu: int
    threads: int
    cpus: int
    gpus: int
    gpu_memory_bytes: int | None


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def fast_defaults(cpus: int, gpus: int, gpu_memory_bytes: int | None, cpu_workers: int = 1) -> Sizing:
    """The worker sizing for ``cpus`` CPU cores and ``gpus`` GPUs whose smallest has ``gpu_memory_bytes`` of
    memory (None: unknown, no memory bound), or CPU mode (``gpus`` 0, ``cpu_workers`` processes).

    GPUs: ``cpus_per_gpu = cpus // gpus``; ``procs_per_gpu = clamp(cpus_per_gpu // 2, 1, 8)``, at most one per
    :data:`MIN_GPU_MEMORY_PER_PROC` of memory; ``threads = clamp(cpus_per_gpu // 2, 1, 8)`` (the module docstring
    gives the measurements). CPU mode: ``threads = clamp(cpus // cpu_workers, 1, 4)``.

    Raises ``ValueError`` for ``cpus`` or ``cpu_workers`` below 1, or ``gpus`` below 0.
    """
    if cpus < 1 or gpus < 0 or cpu_workers < 1:
        raise ValueError(f"cpus {cpus}, gpus {gpus}, cpu_workers {cpu_workers}: expected cpus >= 1, gpus >= 0, "
                         "cpu_workers >= 1")  # fmt: skip
    if gpus == 0:
        return Sizing(1, _clamp(cpus // cpu_workers, 1, MAX_CPU_THREADS), cpus, 0, None)
    cpus_per_gpu = cpus // gpus
    procs = _clamp(cpus_per_gpu // CPUS_PER_PROC, 1, MAX_PROCS_PER_GPU)
    if gpu_memory_bytes is not None:
        procs = _clamp(gpu_memory_bytes // MIN_GPU_MEMORY_PER_PROC, 1, procs)
    threads = _clamp(cpus_per_gpu // CPUS_PER_PROC, 1, MAX_THREADS)
    return Sizing(procs, threads, cpus, gpus, gpu_memory_bytes)


def machine_cpus() -> int:
    """The CPUs this process may run on: ``len(os.sched_getaffinity(0))`` (a systemd unit's ``CPUAffinity=``, a
    container's cpuset), ``os.cpu_count()`` where the platform has no affinity call; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
