"""Prometheus metrics for ``gpuprov images run``: images/s and totals per worker, queue depth, GPU use.

Served by the supervisor on ``--metrics-port`` through prometheus_client (optional: without it,
asking for a port raises :class:`EnvironmentMissing`; a port it cannot listen on, :class:`ConfigError`). GPU
utilisation is read through NVML.
"""

from __future__ import annotations

import logging
from typing import Any

from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.images.lazy_torch import INSTALL_HINT

log = logging.getLogger(__name__)


class Metrics:
    """Gauges and counters, updated by the supervisor from worker events; a no-op without a port."""

    def __init__(self, port: int | None) -> None:
        self.enabled = port is not None
        self._last: dict[str, tuple[float, int]] = {}
        if not self.enabled:
            return
        try:
            import prometheus_client as prom
        except ImportError as exc:
            raise EnvironmentMissing(f"--metrics-port needs prometheus_client: {INSTALL_HINT}") from exc
        registry = prom.CollectorRegistry()
        self.images = prom.Gauge("gpuprov_images_done", "Images completed per worker slot", ["slot"], registry=registry)
        self.rate = prom.Gauge(
            "gpuprov_images_per_second", "Images per second per worker slot", ["slot"], registry=registry
        )
        self.failures = prom.Gauge(
            "gpuprov_images_failed", "Images recorded as failed per slot", ["slot"], registry=registry
        )
        self.batch = prom.Gauge("gpuprov_images_batch_size", "Current batch size per slot", ["slot"], registry=registry)
        self.queue = prom.Gauge("gpuprov_queue_tasks", "Queue tasks per state", ["state"], registry=registry)
        self.gpu_util = prom.Gauge("gpuprov_gpu_utilization_pct", "GPU utilisation (NVML)", ["uuid"], registry=registry)
        try:
            prom.start_http_server(port, registry=registry)  # type: ignore[arg-type]
        except OSError as exc:  # EADDRINUSE, EACCES below 1024
            raise ConfigError(f"--metrics-port {port}: cannot listen there ({exc.strerror}); choose a free port, "
                              "or leave --metrics-port out") from exc
        log.info("metrics on :%s/metrics", port)

    def worker(self, slot: str, done: int, failed: int, batch: int, now: float) -> None:
        if not self.enabled:
            return
        prev_t, prev_done = self._last.get(slot, (now, done))
        if now > prev_t:
            self.rate.labels(slot).set((done - prev_done) / (now - prev_t))
        self._last[slot] = (now, done)
        self.images.labels(slot).set(done)
        self.failures.labels(slot).set(failed)
        self.batch.labels(slot).set(batch)

    def queue_stats(self, stats: Any) -> None:
        if not self.enabled:
            return
        for state in ("pending", "leased", "done", "failed", "dead"):
            self.queue.labels(state).set(getattr(stats, state))

    def gpus(self, uuids: list[str]) -> None:
        """Read utilisation of ``uuids`` through NVML; silently nothing without NVML."""
        if not self.enabled or not uuids:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            for uuid in uuids:
                h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                self.gpu_util.labels(uuid).set(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            pynvml.nvmlShutdown()
        except Exception as exc:  # NVMLError: monitoring must never stop the run
            log.debug("NVML utilisation unavailable: %s", exc)
