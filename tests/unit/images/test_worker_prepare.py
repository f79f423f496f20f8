"""A GPU worker's start-up (gpuprov.images.worker.prepare) with its device, model and decoder stubbed: the JPEG
decoder's warm-up runs beside the model's load and first batch, ends before a batch probe, and leaves no thread
and a closed decoder when the start fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from gpuprov.images.slots import Slot
from gpuprov.images.worker import WorkerConfig


def test_a_failed_warm_up_waits_for_the_decoders_and_closes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's warm-up batch failing on a GPU worker: prepare() raises only once the decoder's warm-up thread
    has ended (no thread left inside nvJPEG as the process exits) and the decoder is closed."""
    import threading
    import time

    from gpuprov.images import decode, worker
    from gpuprov.images.startup import Startup

    warmed: list[int] = []
    closed: list[bool] = []

    def slow_warm(self: decode.Decoder, count: int) -> None:
        time.sleep(0.5)
        warmed.append(count)

    class Failing:
        def process(self, items: object) -> None:
            raise RuntimeError("the model failed on its warm-up batch")

    monkeypatch.setattr(decode.Decoder, "warm", slow_warm)
    monkeypatch.setattr(decode.Decoder, "close", lambda self: closed.append(True))
    monkeypatch.setattr(worker, "self_check", lambda slot: "cuda")
    monkeypatch.setattr(worker, "make_task", lambda *args, **kwargs: Failing())
    monkeypatch.setattr(worker, "synthetic_items", lambda n, device, *size: list(range(n)))
    config = WorkerConfig("sqlite:///q", str(tmp_path), task="stats", batch=8, slot=Slot("gpu0"))
    with pytest.raises(RuntimeError, match="warm-up batch"):
        worker.prepare(config, Startup())
    assert warmed == [worker.DECODER_WARMUP_IMAGES] and closed == [True]
    assert not [t for t in threading.enumerate() if t.name == "decode-warm"]


def test_the_decoders_warm_up_runs_beside_the_model_load_and_ends_before_a_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU the decoder's warm-up starts once the device is open, runs while the model loads, and has ended
    before the batch probe reads the allocator's peak; a model that fails to load leaves no warm-up thread and a
    closed decoder."""
    import threading

    from gpuprov.images import decode, memory, worker
    from gpuprov.images.startup import Startup

    events: list[str] = []
    started, release = threading.Event(), threading.Event()

    def warm(self: decode.Decoder, count: int) -> None:
        started.set()
        release.wait(10)
        events.append("warmed")

    class Task:
        def process(self, items: list[int]) -> list[int]:
            events.append("process")
            return items

    def make_task(*args: object, **kwargs: object) -> Task:
        assert started.wait(10), "the decoder's warm-up had not started when the model was made"
        events.append("model")
        release.set()
        return Task()

    def auto_batch(device: str, probe: object, **kwargs: Any) -> int:
        kwargs["before_probe"]()
        events.append("probe")
        return 8

    monkeypatch.setattr(decode.Decoder, "warm", warm)
    monkeypatch.setattr(worker, "self_check", lambda slot: "cuda")
    monkeypatch.setattr(worker, "make_task", make_task)
    monkeypatch.setattr(worker, "auto_batch", auto_batch)
    monkeypatch.setattr(worker, "synthetic_items", lambda n, device, *size: list(range(n)))
    config = WorkerConfig("sqlite:///q", str(tmp_path), task="stats", slot=Slot("gpu0"))
    _device, _task, backoff, decoder = worker.prepare(config, Startup())
    decoder.close()
    assert events == ["model", "warmed", "probe", "process"] and backoff.batch == 8
    assert memory.AUTO_MAX_BATCH >= worker.DECODER_WARMUP_IMAGES

    closed: list[bool] = []
    monkeypatch.setattr(decode.Decoder, "close", lambda self: closed.append(True))
    monkeypatch.setattr(worker, "make_task", lambda *args, **kwargs: (_ for _ in ()).throw(OSError("no model")))
    release.clear()
    threading.Timer(0.2, release.set).start()
    with pytest.raises(OSError, match="no model"):
        worker.prepare(config, Startup())
    assert closed == [True] and not [t for t in threading.enumerate() if t.name == "decode-warm"]
