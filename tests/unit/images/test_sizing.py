"""The worker sizing rule of ``gpuprov images run`` (gpuprov.images.sizing) and the settings a run takes from it
(gpuprov.cli.images_options.run_settings)."""

from __future__ import annotations

import os

import pytest

from gpuprov.cli.images_options import GPUS_ON_CPUS_ENV, run_settings, settings_line
from gpuprov.exceptions import ConfigError
from gpuprov.images import sizing
from gpuprov.images.sizing import fast_defaults, machine_cpus
from gpuprov.images.slots import Slot

GIB = 1024**3


@pytest.mark.parametrize(
    ("cpus", "gpus", "memory", "cpu_workers", "procs", "threads"),
    [
        (16, 1, 141 * GIB, 1, 8, 8),  # the measured machine: 1 x H200, 16 cores -> 8 procs, 8 threads
        (32, 2, 141 * GIB, 1, 8, 8),  # 16 cores per GPU again
        (8, 1, 80 * GIB, 1, 4, 4),  # 8 cores per GPU: 2 per process
        (128, 8, 80 * GIB, 1, 8, 8),  # 16 cores per GPU on an 8-GPU host
        (256, 2, 80 * GIB, 1, 8, 8),  # many cores: capped at the measured 8
        (64, 8, 16 * GIB, 1, 4, 4),  # 8 cores per GPU, a 16 GiB GPU: 4 GiB per process at least
        (16, 1, 8 * GIB, 1, 2, 8),  # the memory bound below the CPU bound
        (16, 1, 2 * GIB, 1, 1, 8),  # less than one process's share: still one
        (16, 1, None, 1, 8, 8),  # memory unknown: no memory bound
        (3, 1, None, 1, 1, 1),  # fewer than 2 cores per process: one, with one thread
        (2, 4, None, 1, 1, 1),  # fewer cores than GPUs
        (2, 0, None, 1, 1, 2),  # CPU mode: the cores per worker, at most 4
        (16, 0, None, 2, 1, 4),
        (2, 0, None, 4, 1, 1),
    ],
)
def test_fast_defaults_over_cpus_gpus_and_memory(
    cpus: int, gpus: int, memory: int | None, cpu_workers: int, procs: int, threads: int
) -> None:
    rule = fast_defaults(cpus, gpus, memory, cpu_workers)
    assert (rule.procs_per_gpu, rule.threads) == (procs, threads)
    assert (rule.cpus, rule.gpus, rule.gpu_memory_bytes) == (cpus, gpus, memory)


@pytest.mark.parametrize(("cpus", "gpus", "cpu_workers"), [(0, 1, 1), (4, -1, 1), (4, 0, 0)])
def test_fast_defaults_refuses_impossible_machines(cpus: int, gpus: int, cpu_workers: int) -> None:
    with pytest.raises(ValueError, match="expected cpus >= 1"):
        fast_defaults(cpus, gpus, None, cpu_workers)


def test_machine_cpus_is_this_process_affinity() -> None:
    assert machine_cpus() == len(os.sched_getaffinity(0))


def test_run_settings_take_auto_from_the_rule_and_keep_given_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sizing.os, "sched_getaffinity", lambda pid: set(range(32)))
    monkeypatch.delenv(GPUS_ON_CPUS_ENV, raising=False)
    gpus = [Slot("gpu0", "GPU-a", "0:1", memory_bytes=80 * GIB), Slot("gpu1", "GPU-b", "0:2", memory_bytes=16 * GIB)]
    auto = run_settings(gpus, None, None, 1, "auto", "auto")
    # 16 cores per GPU, but the smaller GPU's 16 GiB allows 4 processes
    assert (auto["procs_per_gpu"], auto["threads"], auto["cpus"], auto["gpus"]) == (4, 8, 32, 2)
    assert auto["gpu_memory_bytes"] == 16 * GIB and auto["chosen"] == {"procs_per_gpu": "auto", "threads": "auto"}
    assert settings_line(auto) == ("settings: 4 procs/GPU (auto), 8 decode threads (auto), batch auto, compile auto; "
                                   "32 CPUs, 2 GPUs of 16.0 GiB")  # fmt: skip
    # a run adds MPS's state (gpuprov.images.mps) once its daemon is up or not
    assert settings_line({**auto, "mps": "on"}).endswith("compile auto, MPS on; 32 CPUs, 2 GPUs of 16.0 GiB")
    given = run_settings(gpus, 2, 3, 1, "256", "off")
    assert (given["procs_per_gpu"], given["threads"], given["batch"], given["compile"]) == (2, 3, "256", "off")
    assert given["chosen"] == {"procs_per_gpu": "given", "threads": "given"}


def test_a_service_divides_its_cpus_among_the_gpus_on_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The image_workers role runs one service per GPU on its NUMA node's CPUs and says how many GPUs share them."""
    monkeypatch.setattr(sizing.os, "sched_getaffinity", lambda pid: set(range(64)))  # one node of 64 CPUs
    gpu = [Slot("gpu0", "GPU-a", "0:1", memory_bytes=80 * GIB)]
    monkeypatch.setenv(GPUS_ON_CPUS_ENV, "4")
    shared = run_settings(gpu, None, None, 1, "auto", "auto")
    assert (shared["procs_per_gpu"], shared["threads"], shared["gpus"], shared["gpus_on_cpus"]) == (8, 8, 1, 4)
    monkeypatch.setenv(GPUS_ON_CPUS_ENV, "16")  # 4 CPUs per GPU
    assert run_settings(gpu, None, None, 1, "auto", "auto")["procs_per_gpu"] == 2
    line = settings_line(run_settings(gpu, None, None, 1, "auto", "auto"))
    assert line.endswith("64 CPUs, 1 GPU of 80.0 GiB (16 GPUs on these CPUs)"), line
    monkeypatch.setenv(GPUS_ON_CPUS_ENV, "none")
    with pytest.raises(ConfigError, match="GPUPROV_IMAGES_GPUS_ON_CPUS='none': expected a whole number"):
        run_settings(gpu, None, None, 1, "auto", "auto")
